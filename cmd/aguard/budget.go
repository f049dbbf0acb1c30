package main

import (
	"log/slog"

	"github.com/aguard/aguard/config"
	"github.com/aguard/aguard/internal/membudget"
	"github.com/prometheus/client_golang/prometheus"
)

// newBudget sets up the process's memory budget: --max-memory, or, when it
// is not given, the container's memory limit (none outside a container).
// A limit that cannot be read leaves aguard without a budget, and says so.
func newBudget(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*membudget.Budget, error) {
	limit, source := cfg.MaxMemory, "--max-memory"
	if limit < 0 {
		var err error
		if limit, err = membudget.ContainerLimit(); err != nil {
			log.Warn("no memory budget: the container's memory limit could not be read", "err", err)
		}
		source = "the container's memory limit"
	}
	return membudget.New(membudget.Options{Max: limit, Source: source, Logger: log, Registerer: reg})
}
