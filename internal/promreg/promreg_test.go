package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAllOrNone pins that a failed registration leaves nothing registered.
func TestAllOrNone(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "a"})
	b := prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total", Help: "b"})
	if err := reg.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total", Help: "taken"})); err != nil {
		t.Fatal(err)
	}
	if err := All(reg, a, b); err == nil {
		t.Fatal("registering a taken name succeeded")
	}
	if err := reg.Register(a); err != nil {
		t.Fatalf("a stayed registered after the failure: %v", err)
	}
}
