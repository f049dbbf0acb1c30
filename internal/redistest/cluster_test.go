package redistest

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestClusterServesEverySlotAndSharesOneRunPerPackage(t *testing.T) {
	start := time.Now()
	c := SharedCluster(t)
	t.Logf("cluster of %d nodes up in %v", len(c.Nodes), time.Since(start).Round(time.Millisecond))
	if n := len(c.Masters(t)); n != 3 {
		t.Fatalf("%d masters, want 3", n)
	}
	rc := c.Client(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "{x}1", "{y}2"} { // keys on several masters
		if err := rc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for _, k := range []string{"a", "b", "c", "{x}1", "{y}2"} {
		if v, err := rc.Get(ctx, k).Result(); err != nil || v != "v" {
			t.Fatalf("GET %s = %q, %v", k, v, err)
		}
	}
	if again := SharedCluster(t); again != c {
		t.Fatal("SharedCluster started a second cluster")
	}
	if n, err := rc.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("after SharedCluster's flush: DBSIZE = %d, %v", n, err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}
