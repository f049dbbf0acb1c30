// Package bench holds aguard's performance measurements: the Go benchmarks of
// the per-event pipeline (pipeline_test.go), and under cmd/ the load tools
// that bench/run.sh drives (agentsim, loadgen, benchreport, aguardprof).
// See bench/README.md.
package bench
