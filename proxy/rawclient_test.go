package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawClient is a consumer that speaks HTTP/1.1 by hand over one connection:
// for requests a Go client would normalise (paths, line ends, folded
// headers) and for watching what happens to the connection itself.
type rawClient struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, baseURL string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{c: c, r: bufio.NewReader(c)}
}

// send writes s as it is.
func (rc *rawClient) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
}

// post writes a well-formed POST of body to path, with extra header lines
// (each ending in CRLF).
func (rc *rawClient) post(t *testing.T, path, body, extra string) {
	t.Helper()
	rc.send(t, "POST "+path+" HTTP/1.1\r\nHost: aguard\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n"+extra+"\r\n"+body)
}

// response reads one response and its whole body. It fails the test when
// none comes within 10 s: long before the server's own read timeout (30 s),
// so a request the server is still waiting on fails here.
func (rc *rawClient) response(t *testing.T) (*http.Response, string) {
	t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer rc.c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(rc.r, nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return resp, string(b)
}

// closed reports whether the server closed the connection (reading it ends
// with EOF or a reset within 10 s); false when a byte arrives instead.
func (rc *rawClient) closed(t *testing.T) bool {
	t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer rc.c.SetReadDeadline(time.Time{})
	_, err := rc.r.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection neither closed nor carried anything for 10 s")
	}
	return err != nil
}
