// Package rawio reads and writes non-blocking sockets with raw system
// calls, for the connections that carry a byte per event: a stream's
// agent and consumer sockets, and the Store's Redis connections; and, on
// Linux, it asks about the agent connections aguard checks before and
// after it uses one (Peek: did the peer leave; BytesAcked: did it get
// the request).
//
// A read or write through the net package tells Go's scheduler that the
// goroutine is in a system call (entersyscall). Go's system monitor takes
// the processor of a goroutine it finds there while others wait, hands it
// to another thread (a wake-up and a context switch), and each time it
// does so goes back to looking every 20 µs (runtime/proc.go: sysmon,
// retake). On a non-blocking socket the call cannot block, so rawio makes
// it without telling the scheduler, and waits through Go's netpoller, as
// the net package does, only when the socket has no room or no data:
// deadlines hold as they do for net.Conn. See bench/README.md, "Raw reads
// and writes", for what it saves.
//
// It is not a network library: it dials nothing and knows no protocol.
// On platforms without a raw system call (Solaris, illumos, AIX make
// their calls through libc) it uses the syscall package's calls; off Unix,
// NewWriter and Conn return the connection they are given.
package rawio
