package proxy

import "sync/atomic"

// wakeups counts the times the streams' pumps woke for a readable agent
// socket (stream.pumpRaw) and how many of those wakeups found more than
// one event waiting. Streams whose events come one at a time, however
// many, wake once an event; backlogged ones (the agent writes faster than
// the chain downstream takes the events) find several each time.
type wakeups struct{ all, backlogged atomic.Uint64 }

// add counts a wakeup that read events events before the socket ran dry.
func (w *wakeups) add(events int) {
	w.all.Add(1)
	if events > 1 {
		w.backlogged.Add(1)
	}
}

// Wakeups returns how many times, since New, the streams have woken for
// bytes from the agent and how many of those wakeups found more than one
// event waiting: the load's shape, which package procs fits GOMAXPROCS to
// (procs.Options.Wakeups). Answers read through Go's netpoller rather than
// inline (TLS to the agent, a body that is not chunked) are not counted.
func (p *Proxy) Wakeups() (all, backlogged uint64) {
	return p.wakeups.all.Load(), p.wakeups.backlogged.Load()
}
