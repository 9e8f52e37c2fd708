package sqs_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// endpoint is the URL of the goaws server the examples use
// (scripts/goaws.sh); the tests start their own (internal/brokertest).
var endpoint string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pgbox-goaws-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goaws := func(arg string) (string, error) {
		cmd := exec.Command("../scripts/goaws.sh", arg)
		cmd.Env = append(os.Environ(), "PGBOX_GOAWS_DIR="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	if endpoint, err = goaws("up"); err != nil {
		fmt.Fprintln(os.Stderr, "scripts/goaws.sh up:", err)
		os.Exit(1)
	}
	code := m.Run()
	if _, err := goaws("down"); err != nil {
		fmt.Fprintln(os.Stderr, "scripts/goaws.sh down:", err)
	}
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
