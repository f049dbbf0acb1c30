package state

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// runSubscriber receives invalidations from other Stores (see invalidate).
// Each (re)subscription starts a new epoch, since messages published while
// the subscription was down are lost: cached records are then read from
// Redis again before being served, and protected ones are re-read by the
// sweeper.
func (s *Store) runSubscriber() {
	defer s.wg.Done()
	backoff := minBackoff
	for {
		msg, err := s.ps.Receive(context.Background())
		if err != nil {
			if s.closed.Load() {
				return
			}
			if s.subLive.Swap(false) {
				s.epoch.Add(1)
			}
			if !s.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.epoch.Add(1)
				s.markAllStale()
				s.subLive.Store(true)
				backoff = minBackoff
			}
		case *redis.Message:
			s.invalidate(m.Payload)
		}
	}
}
