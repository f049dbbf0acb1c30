package state

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/aguard/aguard/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared() // the cluster some tests share, before looking for leaks
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
