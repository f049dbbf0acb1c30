package state

import (
	"context"
	"slices"
	"testing"

	"github.com/aguard/aguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// trackedConns opens n connections to srv through a client whose dial hook
// tracks them in cs, each pinged once, and closes them at test cleanup.
func trackedConns(t *testing.T, srv *redistest.Server, cs *connSet, n int) []*redis.Conn {
	t.Helper()
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	c.AddHook(rawDial{conns: cs})
	t.Cleanup(func() { _ = c.Close() })
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = c.Conn()
		t.Cleanup(func() { _ = conns[i].Close() })
		if err := conns[i].Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// pings reports which of conns still answer PING.
func pings(conns ...*redis.Conn) []bool {
	out := make([]bool, len(conns))
	for i, c := range conns {
		out[i] = c.Ping(context.Background()).Err() == nil
	}
	return out
}

// The first connection to reach a new primary names itself by the ends the
// server sees (CLIENT INFO), and closeOthers spares it: on one endpoint
// (ModeSingle) it alone, since another connection to the same address may
// reach the old primary; with Sentinel, every connection to its address.
// Every other connection is closed, and all of them when no connection
// has those ends.
func TestCloseOthersSparesTheConnectionsKnownToReachTheNewPrimary(t *testing.T) {
	ctx := context.Background()
	newer, older := redistest.Start(t), redistest.Start(t)
	for _, tc := range []struct {
		name   string
		byAddr bool
		want   []bool // the first, second connection to newer; the one to older
	}{
		{"single", false, []bool{true, false, false}},
		{"sentinel", true, []bool{true, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := &connSet{byAddr: tc.byAddr}
			toNew := trackedConns(t, newer, cs, 2)
			toOld := trackedConns(t, older, cs, 1)
			self := endsOf(ctx, toNew[0])
			if self == (connEnds{}) {
				t.Fatal("CLIENT INFO names no ends for the connection")
			}
			closed := cs.closeOthers(self)
			got := pings(toNew[0], toNew[1], toOld[0])
			if !slices.Equal(got, tc.want) {
				t.Fatalf("after closeOthers (%d closed), the connections answer %v; want %v", closed, got, tc.want)
			}
		})
	}
	t.Run("none has the ends", func(t *testing.T) {
		cs := &connSet{byAddr: true}
		toNew := trackedConns(t, newer, cs, 2)
		if n := cs.closeOthers(connEnds{client: "192.0.2.1:1", server: newer.Addr()}); n != 2 {
			t.Errorf("closeOthers closed %d connections, want both", n)
		}
		if got := pings(toNew...); got[0] || got[1] {
			t.Fatalf("the connections answer %v after closeOthers; want neither", got)
		}
	})
}
