// Package promreg registers a component's Prometheus collectors all at once:
// either every one is registered or, on the first failure, none stays
// registered. It holds no state.
package promreg

import "github.com/prometheus/client_golang/prometheus"

// All registers cs with reg. When one fails, those already registered are
// unregistered again and the error is returned (the caller wraps it with
// what it was registering).
func All(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}
