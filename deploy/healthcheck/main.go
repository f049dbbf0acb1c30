// Command healthcheck is the container healthcheck shipped in aguard's image:
// the distroless base has no shell, curl or wget to probe /healthz with.
//
//	healthcheck [URL]
//
// It GETs URL and exits 0 on a 2xx answer, 1 otherwise. Without URL it probes
// /healthz on the admin address in AGUARD_ADMIN_LISTEN (default
// 127.0.0.1:9090), reaching a wildcard listener (0.0.0.0, ::) through
// loopback. Kubernetes does not need it: its probes speak HTTP themselves.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	url := ""
	if len(os.Args) > 1 {
		url = os.Args[1]
	} else {
		u, err := adminURL(os.Getenv("AGUARD_ADMIN_LISTEN"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "healthcheck:", err)
			os.Exit(1)
		}
		url = u
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintln(os.Stderr, "healthcheck:", url, "answered", resp.Status)
		os.Exit(1)
	}
}

// adminURL is the /healthz URL of the admin listener at addr.
func adminURL(addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:9090" // aguard's default --admin-listen
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("AGUARD_ADMIN_LISTEN %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
