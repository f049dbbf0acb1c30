package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// numbers is an array of n zeros: n+1 JSON values.
func numbers(n int) []byte { return []byte("[" + strings.Repeat("0,", n-1) + "0]") }

// waitWaiting waits until n inspections wait for their turn, as the
// engine's gauge reports it.
func waitWaiting(t *testing.T, g prometheus.Gauge, n float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(g) != n {
		if time.Now().After(deadline) {
			t.Fatalf("inspections waiting: %v, want %v", testutil.ToFloat64(g), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLargeArgumentsWaitTheirTurn pins Reserve's bound: large arguments are
// inspected within MaxInspectedValues at once, in the order they came; a
// call past the bound is inspected alone; small arguments never wait; a
// context that ends while waiting gets its error and takes nothing.
func TestLargeArgumentsWaitTheirTurn(t *testing.T) {
	ctx := context.Background()
	e, err := New(ctx, Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	gauge := e.met.queued

	huge, err := e.Reserve(ctx, numbers(2*MaxInspectedValues)) // past the bound: alone
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	for _, args := range [][]byte{
		numbers(MinQueuedValues - 2),
		[]byte(`{"text":"` + strings.Repeat("[0,", 300<<10) + `"}`), // long, but two values
	} {
		small, err := e.Reserve(sctx, args) // does not wait, even now
		if err != nil {
			t.Fatalf("arguments of few values (%d bytes) waited: %v", len(args), err)
		}
		small()
	}

	half := numbers(MaxInspectedValues / 2)
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			release, err := e.Reserve(ctx, half)
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			release()
		}()
		waitWaiting(t, gauge, float64(i+1)) // in order
	}
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := e.Reserve(cctx, half)
		gone <- err
	}()
	waitWaiting(t, gauge, 3)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "inspect") {
		t.Errorf("a wait whose context ended returned %v, want its context's error, saying what waited", err)
	}
	waitWaiting(t, gauge, 2) // both still wait beside the call past the bound
	huge()
	if a, b := <-got, <-got; a != 0 || b != 1 {
		t.Errorf("calls were inspected in the order %d, %d; want 0, 1", a, b)
	}
	waitWaiting(t, gauge, 0)
	// The cancelled wait took nothing: the whole bound is free again.
	if !e.inspecting.TryAcquire(MaxInspectedValues) {
		t.Error("the bound is not whole again after every inspection ended")
	}
}
