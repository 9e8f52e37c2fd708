// Package natstest finds the NATS JetStream server for end-to-end tests:
// NATS_URL, or the throwaway server `make nats-up` (scripts/nats.sh) runs.
// There is no skipping: a test run without one fails and says how to get it.
package natstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// URL returns the NATS server's URL.
func URL(tb testing.TB) string {
	tb.Helper()
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		port, err := os.ReadFile(filepath.Join(dir, ".pgbox", "nats", "port"))
		if err == nil {
			return "nats://127.0.0.1:" + strings.TrimSpace(string(port))
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			tb.Fatal(fmt.Errorf("natstest: no NATS server: set NATS_URL, or run `make nats-up` (scripts/nats.sh installs and starts one)"))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("natstest: go.mod not found above the working directory")
		}
		dir = parent
	}
}
