package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is aguard_build_info{version,revision,goversion}, always 1:
// version as set at build time (main.version), revision the one aguard
// --version prints (main.revision, else the VCS commit the Go toolchain
// stamped into the binary; "unknown" without either).
func buildInfo() prometheus.Collector {
	revision := buildVersion().Revision
	if revision == "" {
		revision = "unknown"
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "aguard_build_info",
		Help:        "Always 1; its labels say which aguard runs: version, revision (the VCS commit), goversion.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}
