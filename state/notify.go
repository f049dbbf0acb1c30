package state

// Notice says what happened to a tool-call record, to those told about it
// (package webhook turns each into its event type).
type Notice int

// The notices a Notifier receives.
const (
	// CallStarted: aguard first relayed the call.
	CallStarted Notice = iota + 1
	// CallHeld: the call waits for an approval decision until
	// RequiresApprovalAt.
	CallHeld
	// CallEnded: the call reached a terminal status, whichever it is.
	CallEnded
	// CallApproved: a reviewer approved a held call (ApprovedBy names them).
	CallApproved
	// CallRejected: a reviewer rejected a held call (CallEnded follows).
	CallRejected
)

// String names the notice, for logs.
func (n Notice) String() string {
	switch n {
	case CallStarted:
		return "started"
	case CallHeld:
		return "held"
	case CallEnded:
		return "ended"
	case CallApproved:
		return "approved"
	case CallRejected:
		return "rejected"
	}
	return "unknown"
}

// Notifier is told about tool-call records as they change. Notify must not
// block on the network, and may keep nothing of c past its return: the
// caller goes on changing the record.
type Notifier interface {
	Notify(n Notice, c *ToolCall)
}

// Notification is one notice about a record, as a BatchNotifier takes it.
type Notification struct {
	Notice Notice
	Call   *ToolCall
}

// BatchNotifier is a Notifier that also takes several notices at once, in
// order: Store.Tell hands it together the notices that one acknowledgement
// of Redis released (package webhook queues them in one round trip).
// NotifyAll follows Notify's rules for each.
type BatchNotifier interface {
	Notifier
	NotifyAll(ns []Notification)
}
