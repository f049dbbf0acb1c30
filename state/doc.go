// Package state is aguard's tool-call ledger and thread memory: every tool
// call aguard sees, kept as seed 003's ToolCall record, and what each
// thread's last run left open (pending frontend calls, open interrupts). It
// keeps them in an in-process LRU in front of an optional Redis, so that any
// replica can serve a thread's next run.
//
// It is storage only. It does not read streams, evaluate policies or decide
// anything. Callers (the proxy and the admin API) decide what a record says
// and when it changes. The Store keeps what they write, hands out copies, and
// makes a read-modify-write atomic across replicas (UpdateCall).
//
// # Redis key layout
//
// Every write resets the expiry of each key it touches to Options.TTL:
//
//	aguard:call:<callId>          HASH   v: version, incremented by every write
//	                                     d: the record as JSON (camelCase, as the admin API serves it)
//	                                     s: status, t: thread id (used to maintain the indexes)
//	aguard:thread:<threadId>      STRING the Thread as JSON
//	aguard:threadcalls:<threadId> ZSET   the thread's call ids, scored by last write (Unix ms)
//	aguard:status:<STATUS>        ZSET   call ids in that status, scored by last write (Unix ms)
//	aguard:invalidate:<db>        pub/sub channel, "<origin> <version> <callId>" per record write
//
// Every write is one Lua script call: one round trip, applied atomically,
// whether it carries one record, a thread, or several records and a thread
// (PutCallsSync, the queue's batches). The script bumps each record's
// version. For UpdateCall it first checks that the version is still the one
// read (compare-and-set). It moves the id between status and thread indexes,
// trims index members older than the TTL, and publishes an invalidation. An
// index can briefly name a record that has expired; ListCalls skips it.
//
// Call ids are global keys. aguard assumes that providers' call ids are
// unique; a second call with an existing id overwrites the first. The status
// indexes are global keys too, so the layout needs a standalone Redis (or a
// primary with replicas), not Redis Cluster. Redis 7.0 is enough; nothing
// needs per-field expiry.
//
// # Freshness across replicas
//
// Any replica must see what another one wrote. Records that decide what
// happens next are therefore never served from the LRU while Redis is
// reachable: GetCall reads a live (non-terminal) call from Redis on every
// call, and GetThread always reads the thread from Redis. Each costs one
// round trip, at request time, not per event. A terminal call rarely changes
// again, and may be served from the LRU. If another replica does rewrite it,
// that replica's script publishes an invalidation, and every other Store
// stops serving its copy when the message arrives (typically well under a
// millisecond).
//
// The LRU serves a terminal record only while that is safe. The Store must
// have cached it while its subscription was live, with no newer version
// announced for that id during the read. The subscription must not have
// dropped or been re-established since; any of those starts a new epoch.
// UpdateCall never trusts the LRU: its compare-and-set runs against the
// version in Redis and retries on conflict. Concurrent updates from any
// number of replicas therefore each apply exactly once.
//
// # When Redis is unreachable
//
// Redis going away never blocks a caller beyond its context, and never
// fails a write of valid input. On the first failed command the Store marks
// itself degraded: Ready reports "degraded: redis unreachable: <error>"
// (still ok), and aguard_state_redis_up drops to 0. From then on:
//
//   - writes go to the LRU and to a bounded queue, one entry per key (the
//     latest write wins). PutCall and PutThread return nil; PutCallsSync and
//     UpdateCall report ErrQueued;
//   - reads come from this process's memory. If it has nothing, they fail
//     with ErrUnavailable;
//   - one writer goroutine PINGs Redis with backoff (25 ms doubling to 1 s).
//     When Redis answers, it drains the queue in order of last write, in
//     atomic batches, before new writes go straight to Redis again. Whatever
//     was queued is then in Redis, unless the queue overflowed: past
//     Options.QueueSize the least recently written keys are dropped and
//     counted in aguard_state_queue_dropped_total.
//
// While Redis is unreachable, replicas do not see each other's writes, and
// UpdateCall is atomic only within one process.
//
// Without a Redis URL the LRU is the whole store, and a record it evicts is
// gone.
package state
