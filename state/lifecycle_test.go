package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTransitionsCheckTheStatusTheyStartFrom walks every transition from
// every status: each applies only from the statuses the lifecycle names,
// and a refusal changes nothing.
func TestTransitionsCheckTheStatusTheyStartFrom(t *testing.T) {
	now := t0.Add(time.Hour)
	held := func() *ToolCall {
		c := newCall("c", "t", StatusRequiresConfirmation, t0)
		c.RequiresApprovalAt = ptr(t0.Add(2 * time.Hour))
		return c
	}
	expired := func() *ToolCall {
		c := held()
		c.RequiresApprovalAt = ptr(t0)
		return c
	}
	dispatched := func(deadline time.Time) func() *ToolCall {
		return func() *ToolCall {
			c := newCall("c", "t", StatusExecuting, t0)
			c.ClientToolDeadlineAt = &deadline
			return c
		}
	}
	status := func(st Status) func() *ToolCall { return func() *ToolCall { return newCall("c", "t", st, t0) } }
	tests := []struct {
		name      string
		from      func() *ToolCall
		t         Transition
		ok        bool
		want      Status
		wantCause EndCause
	}{
		{"arguments of a pending frontend call", status(StatusPending), ArgumentsComplete([]byte(`{}`)), true, StatusPending, ""},
		{"arguments of an ended call", status(StatusCompleted), ArgumentsComplete([]byte(`{}`)), false, "", ""},
		{"hold a pending frontend call", status(StatusPending), Hold(now.Add(time.Hour), PolicyDecision{ID: "d"}), true, StatusRequiresConfirmation, ""},
		{"hold an executing call", status(StatusExecuting), Hold(now.Add(time.Hour), PolicyDecision{ID: "d"}), false, "", ""},
		{"deny an open call", status(StatusExecuting), Deny(PolicyDecision{ID: "d", Reason: "no"}, now), true, StatusFailed, CauseDenied},
		{"deny an ended call", status(StatusCancelled), Deny(PolicyDecision{ID: "d", Reason: "no"}, now), false, "", ""},
		{"approve a held call", held, Approve("bob", "", now, time.Hour), true, StatusExecuting, ""},
		{"approve past the deadline times out", expired, Approve("bob", "", now, time.Hour), true, StatusTimedOut, CauseApprovalTimeout},
		{"approve a dispatched call", dispatched(now), Approve("bob", "", now, time.Hour), false, "", ""},
		{"reject a held call", held, Reject("bob", now), true, StatusCancelled, CauseApprovalRejected},
		{"reject an ended call", status(StatusTimedOut), Reject("bob", now), false, "", ""},
		{"expire a held call past its deadline", expired, ExpireApproval(now), true, StatusTimedOut, CauseApprovalTimeout},
		{"expire a held call before its deadline", held, ExpireApproval(now), false, "", ""},
		{"expire a pending call", status(StatusPending), ExpireApproval(now), false, "", ""},
		{"lose a held approval", held, LoseApproval(now), true, StatusCancelled, CauseApprovalLost},
		{"lose the approval of a dispatched call", dispatched(now), LoseApproval(now), false, "", ""},
		{"dispatch a pending call", status(StatusPending), Dispatch(now, time.Hour), true, StatusExecuting, ""},
		{"dispatch a held call", held, Dispatch(now, time.Hour), false, "", ""},
		{"answer a dispatched call", dispatched(now.Add(time.Hour)), Answer([]byte(`"ok"`), "", false, now), true, StatusCompleted, ""},
		{"answer with an error", dispatched(now.Add(time.Hour)), Answer([]byte(`"x"`), "boom", true, now), true, StatusFailed, CauseAnsweredWithError},
		{"answer a held call", held, Answer([]byte(`"ok"`), "", false, now), false, "", ""},
		{"answer an ended call", status(StatusCompleted), Answer([]byte(`"ok"`), "", false, now), false, "", ""},
		{"miss the client deadline", dispatched(t0), MissClientDeadline(now), true, StatusTimedOut, CauseClientDeadline},
		{"miss a deadline not passed", dispatched(now.Add(time.Hour)), MissClientDeadline(now), false, "", ""},
		{"end a held call with its run", held, EndWithRun(CauseRunFailed, "AGUARD_POLICY_DENIED", now), true, StatusCancelled, CauseRunFailed},
		{"end an ended call with its run", status(StatusFailed), EndWithRun(CauseRunEnded, "", now), false, "", ""},
		{"lose an open call of the run", status(StatusPending), LoseRun("run-1", "x", now), true, StatusCancelled, CauseRunLost},
		{"lose a call of another run", status(StatusPending), LoseRun("run-2", "x", now), false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.from()
			before := *c
			err := tt.t.To(c)
			if !tt.ok {
				var te *TransitionError
				if !errors.Is(err, ErrTransition) || !errors.As(err, &te) || te.Name != tt.t.Name || te.From != before.Status {
					t.Fatalf("%s from %s = %v, want a refusal naming both", tt.t.Name, before.Status, err)
				}
				if c.Status != before.Status || c.EndReason != before.EndReason {
					t.Fatalf("a refused transition changed the record: %+v", c)
				}
				return
			}
			if err != nil || c.Status != tt.want || c.Cause != tt.wantCause {
				t.Fatalf("%s = %v: status %s cause %q, want %s %q", tt.t.Name, err, c.Status, c.Cause, tt.want, tt.wantCause)
			}
			if c.Status.Terminal() && c.Status != StatusCompleted && (c.EndReason == "" || c.ExecutionDuration == "") {
				t.Fatalf("ended without endReason or executionDuration: %+v", c)
			}
		})
	}
}

func TestEndReasonTextCarriesTheCauseAndItsDetail(t *testing.T) {
	c := newCall("c", "t", StatusExecuting, t0)
	if err := EndWithRun(CauseRunFailed, "AGUARD_UPSTREAM_LOST", t0).To(c); err != nil {
		t.Fatal(err)
	}
	if c.EndReason != "run failed: AGUARD_UPSTREAM_LOST" || c.Cause != CauseRunFailed {
		t.Errorf("endReason %q, cause %q", c.EndReason, c.Cause)
	}
	c = newCall("c", "t", StatusPending, t0)
	if err := LoseRun("run-1", "its replica r1 stopped", t0).To(c); err != nil {
		t.Fatal(err)
	}
	if c.EndReason != "run lost: run-1 (its replica r1 stopped)" {
		t.Errorf("endReason %q", c.EndReason)
	}
	for _, cause := range []EndCause{CauseApprovalRejected, CauseApprovalTimeout, CauseApprovalLost, CauseClientDeadline} {
		if !cause.Declines() {
			t.Errorf("%s does not decline answers", cause)
		}
	}
	for _, cause := range []EndCause{CauseDenied, CauseAnsweredWithError, CauseRunEnded, CauseRunFailed, CauseRunCancelled, CauseRunLost} {
		if cause.Declines() {
			t.Errorf("%s declines answers", cause)
		}
	}
}

// TestTheSameCallIDInTwoThreadsIsTwoRecords pins that a record is identified
// by (thread, id): writing call_0 of thread D leaves call_0 of thread C as
// it was, a transition on one never touches the other, and the id's
// threads are both listed.
func TestTheSameCallIDInTwoThreadsIsTwoRecords(t *testing.T) {
	storeKinds(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		c := newCall("call_0", "thread-c", StatusRequiresConfirmation, t0)
		c.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
		mustPut(t, s, c)
		mustPut(t, s, newCall("call_0", "thread-d", StatusExecuting, t0.Add(time.Second)))
		if got := mustGet(t, s, "thread-c", "call_0"); got.Status != StatusRequiresConfirmation {
			t.Fatalf("thread C's call after D's write: %s", got.Status)
		}
		if _, err := s.Apply(ctx, Ref{"thread-d", "call_0"}, Answer([]byte(`"ok"`), "", false, time.Now())); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, "thread-c", "call_0"); got.Status != StatusRequiresConfirmation {
			t.Fatalf("thread C's call after D's answer: %s", got.Status)
		}
		if _, err := s.Apply(ctx, Ref{"thread-e", "call_0"}, Answer([]byte(`"forged"`), "", false, time.Now())); !errors.Is(err, ErrNotFound) {
			t.Fatalf("an answer in a thread without the call = %v, want ErrNotFound", err)
		}
		threads, err := s.ThreadsOf(ctx, "call_0")
		if err != nil || len(threads) != 2 || threads[0] != "thread-c" || threads[1] != "thread-d" {
			t.Fatalf("ThreadsOf(call_0) = %v, %v", threads, err)
		}
		held, err := s.ListCalls(ctx, Filter{Status: StatusRequiresConfirmation})
		if err != nil || len(held) != 1 || held[0].ThreadID != "thread-c" {
			t.Fatalf("held calls = %v, %v", held, err)
		}
	})
}

// TestAnApprovalIsBoundToTheArgumentsTheReviewerSaw pins the approval's
// binding to argumentsDigest, through the Store's compare-and-set: a digest
// that is not the call's is refused with ErrArgumentsChanged and writes
// nothing (the call stays held), the call's own digest, in either case,
// approves it.
func TestAnApprovalIsBoundToTheArgumentsTheReviewerSaw(t *testing.T) {
	storeKinds(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		c := newCall("pay", "thread-a", StatusRequiresConfirmation, t0)
		c.IsClientTool = true
		c.ArgumentsJSON = []byte(`{"amount":10}`)
		c.RequiresApprovalAt = ptr(time.Now().Add(time.Hour))
		mustPut(t, s, c)
		stored := mustGet(t, s, "thread-a", "pay")
		if stored.ArgumentsDigest == "" {
			t.Fatal("the store filled in no argumentsDigest")
		}
		seen := strings.Repeat("0", 64) // the digest of other arguments
		_, err := s.Apply(ctx, RefOf(c), Approve("alice", seen, time.Now(), time.Hour))
		if !errors.Is(err, ErrArgumentsChanged) || errors.Is(err, ErrTransition) {
			t.Fatalf("approving other arguments = %v, want ErrArgumentsChanged only", err)
		}
		if got := mustGet(t, s, "thread-a", "pay"); got.Status != StatusRequiresConfirmation || got.Approved != nil || got.ApprovedBy != "" {
			t.Fatalf("a refused approval changed the record: %+v", got)
		}
		got, err := s.Apply(ctx, RefOf(c), Approve("alice", strings.ToUpper(stored.ArgumentsDigest), time.Now(), time.Hour))
		if err != nil || got.Status != StatusExecuting || got.ApprovedBy != "alice" {
			t.Fatalf("approving the call's own arguments = %+v, %v", got, err)
		}
	})
}

// TestAPolicyDecisionIsRecordedWhole pins that the transitions that record
// a decision keep its id, its policy's revision and its reason, and that
// the webhook profile carries them with the requester.
func TestAPolicyDecisionIsRecordedWhole(t *testing.T) {
	d := PolicyDecision{ID: "dec-1", Revision: "bundle-v42", Reason: "payments need a second pair of eyes"}
	for _, tr := range []Transition{Hold(t0.Add(time.Hour), d), Allow(d), Deny(d, t0)} {
		c := newCall("c", "t", StatusPending, t0)
		c.IsClientTool = true
		c.RequestedBy = "alice@example.com"
		if err := tr.To(c); err != nil {
			t.Fatalf("%s: %v", tr.Name, err)
		}
		if c.DecisionID != d.ID || c.PolicyRevision != d.Revision || c.DecisionReason != d.Reason {
			t.Errorf("%s recorded decision %q, revision %q, reason %q", tr.Name, c.DecisionID, c.PolicyRevision, c.DecisionReason)
		}
		if c.RequestedBy != "alice@example.com" {
			t.Errorf("%s: requestedBy = %q, want it kept", tr.Name, c.RequestedBy)
		}
	}
}

// TestEveryRecordAWebhookCarriesHasItsUpdateTime pins that a record the
// proxy tells webhooks about before the Store writes it — a new call, a call
// its run ends — carries the time of that change as updatedAt, never the
// zero time.
func TestEveryRecordAWebhookCarriesHasItsUpdateTime(t *testing.T) {
	c := NewCall(Ref{"t", "c"}, "run-1", "lookup", false, t0)
	if !c.UpdatedAt.Equal(t0) {
		t.Fatalf("a new call's updatedAt is %v, want %v", c.UpdatedAt, t0)
	}
	end := t0.Add(3 * time.Second)
	if err := EndWithRun(CauseRunEnded, "", end).To(c); err != nil {
		t.Fatal(err)
	}
	if !c.UpdatedAt.Equal(end) {
		t.Fatalf("an ended call's updatedAt is %v, want %v", c.UpdatedAt, end)
	}
}

// TestListCallsFiltersByRequester pins ?requestedBy=: only the calls of the
// runs that consumer started, with Redis and without.
func TestListCallsFiltersByRequester(t *testing.T) {
	storeKinds(t, func(t *testing.T, s *Store) {
		for i, by := range []string{"alice", "bob", "alice", ""} {
			c := newCall(fmt.Sprintf("c%d", i), "thread-r", StatusExecuting, t0.Add(time.Duration(i)*time.Second))
			c.RequestedBy = by
			mustPut(t, s, c)
		}
		for _, f := range []Filter{{RequestedBy: "alice"}, {RequestedBy: "alice", ThreadID: "thread-r"}, {RequestedBy: "alice", Status: StatusExecuting}} {
			got, err := s.ListCalls(context.Background(), f)
			if err != nil || len(got) != 2 || got[0].ID != "c0" || got[1].ID != "c2" {
				t.Errorf("ListCalls(%+v) = %v, %v; want c0 and c2", f, got, err)
			}
		}
	})
}
