// Package state is aguard's tool-call ledger and thread memory: every tool
// call aguard sees, kept as a ToolCall record (the AG-UI ecosystem's audit
// model, as the README's ledger section describes it), and what each
// thread's last run left open (pending frontend calls, approvals, open
// interrupts). It keeps them in memory in front of an optional Redis, so
// that any replica can serve a thread's next run.
//
// It owns the life of a call (lifecycle.go): named transitions (start,
// arguments_complete, hold, approve, reject, expire_approval,
// lose_approval, dispatch, answer, miss_client_deadline, end_with_run,
// lose_run, deny), each checking the status it starts from, each ending
// call recording a typed EndCause beside its endReason text. The proxy and
// the admin API decide which transition applies; they never set a status
// themselves. The package does not read streams or evaluate policies.
//
// The files, one idea each: store.go (the Store, its options, readiness),
// client.go (the Redis clients of each --redis-mode), ref.go (record
// identity, key names), calls.go and threads.go (reads and writes),
// behind.go (writes behind the caller), check.go (the request-side read and
// write, one round trip each), list.go and page.go (lists across the
// ledger, and their pages), cache.go and protect.go (memory), queue.go and
// writer.go (the queue of writes for Redis, and its writer), redis.go
// (scripts), subscriber.go (invalidations), loss.go (loss detection and
// write-back), primary.go and fence.go (a failover's new primary, and the
// old one's fencing), slow.go (a Redis answering late), runs.go (runs
// registry), sweeper.go (deadlines, lost runs, upkeep).
//
// # Identity
//
// A record is identified by its thread and its id (Ref): agents number
// calls per run (call_0, tool_1), so the same id in two threads is two
// calls. Every method takes both; a transition can only reach a record of
// the thread it names. ThreadsOf lists the threads holding an id.
//
// # Redis key layout
//
// Every key of one thread shares the hash tag {<thread>} (the thread id
// with '%', '{' and '}' percent-encoded; the empty id as "%"), so that a
// Redis Cluster keeps a thread in one slot:
//
//	aguard:{<thread>}:call:<callId>  HASH   v: version, d: the record as JSON (camelCase, as the
//	                                        admin API serves it), s: status, o: the replica that
//	                                        wrote it, r: "1" while restored
//	aguard:{<thread>}:thread         HASH   v: version, d: the Thread as JSON
//	aguard:{<thread>}:calls          ZSET   the thread's call ids, scored by expiry (Unix ms)
//
// The global indexes, apart from the threads' keys; their members are refs
// as JSON arrays ["<thread>","<callId>"]:
//
//	aguard:status:<STATUS>           ZSET   records in that status, scored by expiry (Unix ms)
//	aguard:ids:<callId>              ZSET   thread ids holding that call id, scored by expiry
//	aguard:deadlines                 ZSET   records held for approval, scored by requiresApprovalAt
//	aguard:replicas                  ZSET   replica ids, scored by their last heartbeat (Redis clock)
//	aguard:replica:<replica>         STRING a replica's marker (see loss), renewed each heartbeat
//	aguard:runs:<replica>            HASH   the runs a replica streams: ["<thread>","<runId>"] ->
//	                                        "live", or "lost <dead replica>" once claimed
//	aguard:recovering                HASH   replica -> Unix ms, while it writes back after a loss
//	aguard:primary                   HASH   replica -> run_id of the primary it has caught up with
//	                                        (see "When the primary changes")
//	aguard:replaced                  STRING on a primary a failover replaced, its own run_id, for a
//	                                        minute (see "When the primary changes")
//	aguard:invalidate:<db>           pub/sub, one message per write: "<origin>" then
//	                                        "<version> <member>" per record or thread written
//
// On a Redis Cluster (Options.RedisMode ModeCluster) the keys apart from
// the threads' are laid out for slots (see keyspace): the registry's keys
// share the tag {registry} (aguard:{registry}:replicas, …:replica:<id>,
// …:runs:<id>, …:recovering), and the global indexes are split into 16
// shards, aguard:{ix<n>}:status:<STATUS>, …:ids:<callId>, …:deadlines, a
// thread's entries in the shard its id hashes to. Lists read every shard in
// one pipeline.
//
// Every write of records and a thread is one Lua script call per thread:
// one round trip, atomic, whatever it carries. Its KEYS are that thread's
// keys only (one slot); the part that maintains the global indexes is
// separate in the script and reads only what the thread part computed: on
// a Redis Cluster it runs as a call of its own on the shard's slot, a
// second round trip. A record's version grows
// with every write and is never below the time in ms, so that a write made
// after a data loss is newer than any copy from before it. Compare-and-set
// (Apply, ApplyAnswers) checks the version read.
//
// Writes behind their callers (Record) gather: the first into an empty
// queue waits up to Options.WriteDelay (250 ms) for others, so that one
// round trip carries them and a record changed meanwhile is written once.
// What someone waits for goes at once, with everything before it: a
// RecordSync, a compare-and-set on a record still queued, a call held for
// approval, Send (a webhook names the record), Close, and a replica's
// catching up with a new primary. Other replicas read a gathered write
// that much later.
//
// Expiry: each record's keys expire Options.TTL (7 days) after its last
// write, or TTL after its latest deadline (requiresApprovalAt,
// clientToolDeadlineAt) when that is later: a policy's approvalTimeout
// longer than the TTL never outlives its record. A thread's keys are
// extended, never shortened, to the longest expiry written with them.
// Index members carry their record's expiry as score; reads skip expired
// ones.
//
// Redis 7.0 is enough.
//
// # Freshness across replicas
//
// Any replica must see what another one wrote. Records that decide what
// happens next are therefore never served from memory while Redis is
// reachable: GetCall reads a live (non-terminal) call from Redis on every
// call, and threads are always read from Redis. A terminal call rarely
// changes again and may be served from memory; if another replica rewrites
// it, that replica's invalidation stops every other Store serving its copy.
// Memory serves a terminal record only if it was cached while the
// subscription was live, with no newer version announced during the read,
// and the subscription has not dropped since (each drop starts a new
// epoch). Compare-and-set never trusts memory.
//
// # Memory, and what is never evicted
//
// An LRU holds Options.CacheSize records and as many threads. Apart from it,
// a protected set holds what this replica wrote that protects something: a
// call held for approval, a call dispatched to the application and not
// answered, a thread with pending calls, approvals or interrupts. Other
// threads' traffic cannot evict it; an entry leaves when its record stops
// protecting anything, or when its Redis keys would have expired. It is
// bounded by Options.CacheSize entries and Options.ProtectedBytes bytes. A
// hold reserves its place first (ReserveHold, from the proxy's policy
// verdict): when the set is full the hold is refused, and the proxy denies
// the call instead, so no approval exists that memory cannot keep. Without
// Redis it is the only copy; with Redis it is what a write-back restores.
//
// # When Redis is unreachable
//
// Redis going away never blocks a caller beyond its context and never fails
// a write of valid input. On the first failed command the Store marks
// itself degraded (Ready: "degraded: redis unreachable: …";
// aguard_state_redis_up 0). Writes then go to memory and to a bounded queue
// (latest write per key; past Options.QueueSize writes or
// Options.QueueBytes bytes the oldest are dropped and counted); reads come
// from memory (the last copy: "last known"), or fail with ErrUnavailable
// when memory has nothing. One writer goroutine PINGs with backoff and
// drains the queue in order once Redis answers. Replicas do not see each
// other's writes meanwhile, and compare-and-set is atomic only within one
// process.
//
// # When Redis loses data
//
// Redis may lose data and stay reachable: FLUSHALL, a restart without
// persistence, a failover to a replica that lagged, eviction. Each Store
// notices within seconds, by its marker key vanishing (checked every
// heartbeat, 1 s, and in the pipeline of every ReadThread), Redis's run_id
// changing, evicted_keys growing, or a record or thread it protects being
// absent. It then logs "redis lost data" (attribute cause), counts it
// (aguard_state_redis_data_lost_total{cause}), reports degraded for at least
// 10 s and until it has written back what it holds, flags itself in
// aguard:recovering meanwhile, and writes back its memory (protected set
// first, then the LRU) as restores: a record or thread is written only if
// Redis has no newer version, so whatever another replica wrote since the
// loss stays. Restored records carry r=1 until their next write.
//
// Until a loss is written back, nothing absent is read as empty: a thread
// Redis does not have is served from this replica's memory (its last known
// pending calls and approvals), or is unavailable (ErrUnavailable) when
// memory has nothing of it. An answer to a held call whose decision cannot
// be vouched for — its record restored, known only from memory during the
// loss, or missing while its thread lists it as held (Thread.Approvals) —
// is declined (lose_approval), never forwarded as it is.
//
// # When the primary changes
//
// On one Redis (single, sentinel) a failover promotes a replica that lacks
// what the old primary took after the promotion, and answers with older
// copies: a thread can list as pending a call that was answered. Every new
// connection reads the server's run_id before it serves anything, so the
// first command to reach a new primary counts the loss (cause "restart").
// Each replica then writes back, and says in aguard:primary which primary
// it has caught up with. Until every replica live in aguard:replicas has
// caught up, a Store that saw the change reads no record or thread there:
// its reads wait for them, at most three heartbeats, then fail with
// ErrUnavailable. A read that was itself the first to reach the new
// primary is made again once they have. A write the old primary
// acknowledged just before the change was seen, whose acknowledgement has
// not reached memory yet, is waited for before the write-back takes its
// snapshot. The Store's connections reach the new primary one at a time,
// so the first to see it closes, before the write-back, every connection
// the Store has open but those it knows to reach the new primary, and a
// new one that still reaches the old primary (whose replication ID the new
// one took over) is refused: nothing the Store writes after the change
// lands on the old primary. Before it writes to the new primary, it marks
// the old one replaced (aguard:replaced), so that a replica that has not
// heard of the failover yet reads nothing there. On a Redis Cluster a
// master replaced is noticed at the next beat, without that wait.
//
// # Deadlines and lost runs
//
// The sweeper (every second) times out approvals not decided by
// requiresApprovalAt (expire_approval; aguard:deadlines with Redis, the
// protected set without), reporting each through Options.OnEnd exactly
// once across replicas (compare-and-set). Each replica beats in
// aguard:replicas and lists the runs it streams in aguard:runs:<replica>
// (RunStarted, RunEnded). When a replica has been silent for 10 s, the
// first sweeper to see it claims its runs (one script: exactly one
// claimer) and ends their open calls (lose_run: CANCELLED, "run lost:
// <runId> (its replica <id> stopped)"), reported through OnEnd.
//
// Without a Redis URL memory is the whole store: the LRU evicts what no
// longer protects anything, and everything is gone at exit.
package state
