// Package loadresult is the JSON that bench/cmd/loadgen writes for one
// measurement (-json), and that benchreport and benchplot read back: one
// schema in one place. It holds no logic beyond reading a file.
package loadresult

import (
	"encoding/json"
	"fmt"
	"os"
)

// Result is what one loadgen run measured.
type Result struct {
	Label        string         `json:"label,omitempty"`
	Mode         string         `json:"mode"`
	URL          string         `json:"url"`
	Streams      int            `json:"streams"`
	WindowS      float64        `json:"windowSeconds"`
	LoadAvgStart string         `json:"loadAvgStart"`
	LoadAvgEnd   string         `json:"loadAvgEnd"`
	RunsStarted  int64          `json:"runsStarted"`
	RunsDone     int64          `json:"runsCompleted"`
	Events       int64          `json:"events"`      // data frames received inside the window
	EventsTotal  int64          `json:"eventsTotal"` // data frames received in all
	EventsPerSec float64        `json:"eventsPerSecond"`
	Errors       map[string]int `json:"errors"`
	Latency      *Latency       `json:"latency,omitempty"`
	Opened       int            `json:"opened,omitempty"` // idle mode: streams open when memory was sampled
	Procs        []Proc         `json:"procs"`
	// Connections loadgen opened, over the whole run (ramp and warm-up
	// included); with -agent-stats, those the agent accepted and the runs it
	// served meanwhile.
	ConsumerConns int64       `json:"consumerConnections"`
	Agent         *AgentStats `json:"agent,omitempty"`
}

// AgentStats is agentsim's GET /stats, or the difference of two.
type AgentStats struct {
	Connections int64 `json:"connections"`
	Runs        int64 `json:"runs"`
}

// Latency summarises the stamped events received inside the window, in
// milliseconds.
type Latency struct {
	Samples int     `json:"samples"`
	P50     float64 `json:"p50Ms"`
	P90     float64 `json:"p90Ms"`
	P99     float64 `json:"p99Ms"`
	P999    float64 `json:"p999Ms"`
	Max     float64 `json:"maxMs"`
	// CDF is the distribution at loadgen's quantiles and at the maximum
	// (q = 1): enough points to draw it, its tail included (benchplot).
	CDF []CDFPoint `json:"cdf"`
}

// CDFPoint is one quantile of the latency: a fraction Q of the samples took
// at most Ms milliseconds.
type CDFPoint struct {
	Q  float64 `json:"q"`
	Ms float64 `json:"ms"`
}

// Proc is one watched process over the window.
type Proc struct {
	Name          string  `json:"name"`
	PIDs          []int   `json:"pids"`
	CPUSeconds    float64 `json:"cpuSeconds"`
	CPUPerMEvents float64 `json:"cpuSecondsPerMillionEvents"`
	// UserSeconds and SystemSeconds split CPUSeconds: the process's own
	// code, and the kernel working for it (system calls and the network
	// stack's work they trigger); per 1M events likewise.
	UserSeconds      float64 `json:"userSeconds"`
	SystemSeconds    float64 `json:"systemSeconds"`
	UserPerMEvents   float64 `json:"userSecondsPerMillionEvents"`
	SystemPerMEvents float64 `json:"systemSecondsPerMillionEvents"`
	RSSBeforeKiB     int64   `json:"rssBeforeKiB"`
	RSSAfterKiB      int64   `json:"rssAfterKiB"`
	RSSPerStreamKB   float64 `json:"rssPerStreamKiB,omitempty"` // idle mode
}

// Proc returns the watched process named name, if r has one.
func (r *Result) Proc(name string) (Proc, bool) {
	if r == nil {
		return Proc{}, false
	}
	for _, p := range r.Procs {
		if p.Name == name {
			return p, true
		}
	}
	return Proc{}, false
}

// Load reads the result in the file at path; a missing file is a nil
// result and no error.
func Load(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}
