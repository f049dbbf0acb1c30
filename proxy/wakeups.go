package proxy

import "sync/atomic"

// wakeups counts the times the streams' pumps woke for a readable agent
// socket (stream.pumpRaw) and the events those wakeups read. Streams whose
// events come one at a time, however many, read one event a wakeup;
// backlogged ones (the agent writes faster than the chain downstream takes
// the events) read several each time.
type wakeups struct{ all, events atomic.Uint64 }

// add counts a wakeup that read events events before the socket ran dry.
func (w *wakeups) add(events int) {
	w.all.Add(1)
	w.events.Add(uint64(events))
}

// Wakeups returns how many times, since New, the streams have woken for
// bytes from the agent and how many events those wakeups read: the load's
// shape, which package procs fits GOMAXPROCS to (procs.Options.Wakeups).
// Answers read through Go's netpoller rather than inline (TLS to the
// agent, a body that is not chunked) are not counted.
func (p *Proxy) Wakeups() (all, events uint64) {
	return p.wakeups.all.Load(), p.wakeups.events.Load()
}
