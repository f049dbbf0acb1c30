package state

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Ref identifies a tool-call record: the thread it belongs to and the id the
// agent gave the call. Agents number calls per run (call_0, tool_1), so the
// same id in two threads names two different calls; every Store method, key
// and index takes both.
type Ref struct {
	ThreadID string
	ID       string
}

// RefOf returns the Ref of c.
func RefOf(c *ToolCall) Ref { return Ref{ThreadID: c.ThreadID, ID: c.ID} }

// String writes r for errors and logs, both parts quoted.
func (r Ref) String() string {
	return "thread " + strconv.Quote(r.ThreadID) + " call " + strconv.Quote(r.ID)
}

// RunRef identifies a run: its thread and runId.
type RunRef struct {
	ThreadID string
	RunID    string
}

// Redis key layout; see the package documentation. Keys of one thread share
// the hash tag {<thread>}, so that a Redis Cluster keeps them in one slot and
// the per-thread write script touches one slot only; the global indexes are
// apart from them.
const (
	keyPrefix          = "aguard:"
	statusKeyPrefix    = "aguard:status:"    // ZSET of members, scored by expiry (Unix ms)
	idThreadsKeyPrefix = "aguard:ids:"       // ZSET of thread ids holding a call id, scored by expiry (Unix ms)
	deadlinesKey       = "aguard:deadlines"  // ZSET of members held for approval, scored by requiresApprovalAt (Unix ms)
	replicasKey        = "aguard:replicas"   // ZSET of replica ids, scored by last heartbeat (Unix ms, Redis clock)
	markerKeyPrefix    = "aguard:replica:"   // STRING per replica, with a short expiry: liveness and loss marker
	runsKeyPrefix      = "aguard:runs:"      // HASH per replica: run member -> "live" or "lost <replica>"
	recoveringKey      = "aguard:recovering" // HASH replica id -> Unix ms, while that replica writes back after a loss
	primaryKey         = "aguard:primary"    // HASH replica id -> run_id of the primary it has caught up with (one Redis only)
	invalidateChannel  = "aguard:invalidate:"
)

// hashTag escapes a thread id for use inside {…}: '%', '{' and '}' are
// percent-encoded, so the tag ends at the first '}' and two thread ids never
// give the same key. The empty thread id becomes "%", which no other id
// gives, so that its keys still share a non-empty tag.
func hashTag(thread string) string {
	if thread == "" {
		return "%"
	}
	if !strings.ContainsAny(thread, "%{}") {
		return thread
	}
	var b strings.Builder
	for i := 0; i < len(thread); i++ {
		switch c := thread[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func threadPrefix(thread string) string { return keyPrefix + "{" + hashTag(thread) + "}:" }

// threadKey is the thread's HASH: v (version), d (the Thread as JSON).
func threadKey(thread string) string { return threadPrefix(thread) + "thread" }

// threadCallsKey is the ZSET of the thread's call ids, scored by expiry.
func threadCallsKey(thread string) string { return threadPrefix(thread) + "calls" }

// callKey is the record's HASH: v (version), d (record JSON), s (status),
// r ("1" when a write-back restored it and no decision has been written since).
func callKey(r Ref) string { return threadPrefix(r.ThreadID) + "call:" + r.ID }

// member is a Ref as it appears in the global indexes and invalidations: the
// JSON array ["<thread>","<id>"].
func member(r Ref) string {
	if plainJSON(r.ThreadID) && plainJSON(r.ID) {
		return `["` + r.ThreadID + `","` + r.ID + `"]` // what json.Marshal writes
	}
	b, _ := json.Marshal([2]string{r.ThreadID, r.ID})
	return string(b)
}

// plainJSON reports whether json.Marshal writes s as it is, in quotes:
// printable ASCII but for '"', '\\' and the HTML characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// parseMember decodes a member.
func parseMember(s string) (Ref, error) {
	var a [2]string
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return Ref{}, fmt.Errorf("%w: index member %q: %w", errCorrupt, s, err)
	}
	return Ref{ThreadID: a[0], ID: a[1]}, nil
}

// runMember is a RunRef as a field of a replica's runs HASH.
func runMember(r RunRef) string {
	b, _ := json.Marshal([2]string{r.ThreadID, r.RunID})
	return string(b)
}

func parseRunMember(s string) (RunRef, error) {
	var a [2]string
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return RunRef{}, fmt.Errorf("%w: run member %q: %w", errCorrupt, s, err)
	}
	return RunRef{ThreadID: a[0], RunID: a[1]}, nil
}

// indexShards is how many shards the global indexes are split into on a
// Redis Cluster: each shard's keys share a hash tag of their own, so that
// one write's index updates touch one slot, and the shards spread over the
// masters.
const indexShards = 16

// keyspace names the keys apart from the threads': the replica registry
// and the global indexes. On one Redis (single, sentinel) they are the
// documented aguard:replicas, aguard:status:<STATUS>, …; on a Redis Cluster
// the registry shares the tag {registry} (so its scripts touch one slot),
// and each thread's index entries live in one of indexShards shards,
// aguard:{ix<n>}:status:<STATUS>, …, chosen by the thread id.
type keyspace struct {
	reg    string   // registry prefix
	shards []string // index prefixes
}

func newKeyspace(cluster bool) keyspace {
	if !cluster {
		return keyspace{reg: keyPrefix, shards: []string{keyPrefix}}
	}
	k := keyspace{reg: keyPrefix + "{registry}:"}
	for i := range indexShards {
		k.shards = append(k.shards, keyPrefix+"{ix"+strconv.Itoa(i)+"}:")
	}
	return k
}

// shardOf is the index prefix of thread's entries.
func (k keyspace) shardOf(thread string) string {
	if len(k.shards) == 1 {
		return k.shards[0]
	}
	h := fnv.New32a()
	h.Write([]byte(thread))
	return k.shards[h.Sum32()%uint32(len(k.shards))]
}

func (k keyspace) statusKey(shard string, st Status) string { return shard + "status:" + string(st) }
func (k keyspace) idsKey(shard, id string) string           { return shard + "ids:" + id }
func (k keyspace) deadlinesKey(shard string) string         { return shard + "deadlines" }
func (k keyspace) replicasKey() string                      { return k.reg + "replicas" }
func (k keyspace) markerKey(replica string) string          { return k.reg + "replica:" + replica }
func (k keyspace) runsKey(replica string) string            { return k.reg + "runs:" + replica }
func (k keyspace) recoveringKey() string                    { return k.reg + "recovering" }
func (k keyspace) primaryKey() string                       { return k.reg + "primary" }
func (k keyspace) replacedKey() string                      { return k.reg + "replaced" }
