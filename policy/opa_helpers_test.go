package policy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"
	opacompile "github.com/open-policy-agent/opa/v1/compile"
)

// buildBundle builds a bundle of files with OPA's own tooling, as `opa build
// -r revision [--signing-key key --signing-alg RS256] DIR` does.
func buildBundle(t testing.TB, files map[string]string, revision string, signingKey string) []byte {
	t.Helper()
	dir := policyDir(t, files)
	var out bytes.Buffer
	// Relative paths, as `opa build .` run in the folder writes them.
	c := opacompile.New().WithFS(os.DirFS(dir)).WithPaths(".").WithRevision(revision).WithOutput(&out)
	if signingKey != "" {
		c = c.WithBundleSigningConfig(bundle.NewSigningConfig(signingKey, "RS256", ""))
	}
	if err := c.Build(context.Background()); err != nil {
		t.Fatalf("opa build: %v", err)
	}
	return out.Bytes()
}

// rsaKeyPair returns a new RSA key, private key PEM and public key PEM.
func rsaKeyPair(t *testing.T) (private, public string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}

// opaService is a test server speaking OPA's management APIs on a loopback
// socket: bundle download (GET with ETag and If-None-Match, 304 when
// unchanged), decision logs (POST /logs, gzipped JSON arrays) and status
// (POST /status).
type opaService struct {
	t    testing.TB
	ln   net.Listener
	addr string
	srv  *http.Server

	mu        sync.Mutex
	bundles   map[string][]byte // path → bundle
	downloads int
	notMod    int
	logs      []map[string]any
	batches   int
	statuses  []map[string]any
	logStatus int // answer to POST /logs; 0 means 200
}

func newOPAService(t testing.TB) *opaService {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &opaService{t: t, addr: ln.Addr().String(), bundles: map[string][]byte{}}
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *opaService) url() string { return "http://" + s.addr }

func (s *opaService) serve(ln net.Listener) {
	s.ln = ln
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle)}
	go s.srv.Serve(ln)
}

// stop closes the listener: connections are refused until start.
func (s *opaService) stop() {
	s.srv.Close()
}

// start listens again on the same address.
func (s *opaService) start() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.serve(ln)
}

func (s *opaService) setBundle(path string, b []byte) {
	s.mu.Lock()
	s.bundles[path] = b
	s.mu.Unlock()
}

func etagOf(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}

func (s *opaService) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if body, err = io.ReadAll(zr); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/bundles/"):
		b, ok := s.bundles[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		etag := etagOf(b)
		if r.Header.Get("If-None-Match") == etag {
			s.notMod++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		s.downloads++
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(b)
	case r.Method == http.MethodPost && r.URL.Path == "/logs":
		if s.logStatus != 0 {
			w.WriteHeader(s.logStatus)
			return
		}
		var events []map[string]any
		if err := json.Unmarshal(body, &events); err != nil {
			s.t.Errorf("decision log batch is not a JSON array: %v: %s", err, body)
			http.Error(w, err.Error(), 400)
			return
		}
		s.batches++
		s.logs = append(s.logs, events...)
	case r.Method == http.MethodPost && r.URL.Path == "/status":
		var st map[string]any
		if err := json.Unmarshal(body, &st); err != nil {
			s.t.Errorf("status is not JSON: %v: %s", err, body)
		}
		s.statuses = append(s.statuses, st)
	default:
		http.NotFound(w, r)
	}
}

// logged returns the decision-log events received, by decision_id.
func (s *opaService) logged() map[string]map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]any{}
	for _, ev := range s.logs {
		id, _ := ev["decision_id"].(string)
		out[id] = ev
	}
	return out
}

// lastBundleStatus returns the last status report's entry for bundle name.
func (s *opaService) lastBundleStatus(name string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.statuses) - 1; i >= 0; i-- {
		bundles, _ := s.statuses[i]["bundles"].(map[string]any)
		if b, ok := bundles[name].(map[string]any); ok {
			return b
		}
	}
	return nil
}

// opaConfig is an OPA configuration pointing every plugin at svc, polling
// and uploading every second; extra is appended as is.
func opaConfig(svc *opaService, extra string) []byte {
	return []byte(fmt.Sprintf(`
services:
  mgmt:
    url: %s
labels:
  team: tools
bundles:
  aguard:
    service: mgmt
    resource: bundles/aguard.tar.gz
    polling:
      min_delay_seconds: 1
      max_delay_seconds: 1
decision_logs:
  service: mgmt
  reporting:
    min_delay_seconds: 1
    max_delay_seconds: 1
status:
  service: mgmt
%s`, svc.url(), extra))
}
