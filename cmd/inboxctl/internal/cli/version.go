package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
)

// buildInfo is what this binary was built from, as inboxctl version (and
// --version) prints it.
type buildInfo struct {
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go_version"`
	// Modified is set when the checkout had uncommitted changes.
	Modified bool `json:"modified"`
	// Module is the main module's path.
	Module string `json:"module"`
	// Revision is the commit built from, when built from a checkout.
	Revision string `json:"revision,omitzero"`
	// RevisionTime is that commit's time.
	RevisionTime string `json:"revision_time,omitzero"`
	// SchemaVersion is the schema version this build needs.
	SchemaVersion int64 `json:"schema_version"`
	// Version is the module version: a release tag, a pseudo-version,
	// or "(devel)".
	Version string `json:"version"`
}

// readBuildInfo reads what the Go toolchain stamped into the binary:
// the module's version and, when built from a checkout, the vcs revision
// and whether it had uncommitted changes.
func readBuildInfo() buildInfo {
	b := buildInfo{GoVersion: runtime.Version(), Module: "github.com/pgbox/pgbox", SchemaVersion: pgbox.SchemaVersion, Version: "(unknown)"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if info.Main.Path != "" {
		b.Module = info.Main.Path
	}
	if info.Main.Version != "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.RevisionTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the version as --version prints it.
func (b buildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "inboxctl %s (%s, %s)\n", b.Version, b.Module, b.GoVersion)
	if b.Revision != "" {
		fmt.Fprintf(&s, "built from revision %s", b.Revision)
		if b.RevisionTime != "" {
			fmt.Fprintf(&s, " of %s", b.RevisionTime)
		}
		if b.Modified {
			s.WriteString(", with uncommitted changes")
		}
		s.WriteString("\n")
	}
	fmt.Fprintf(&s, "needs pgbox schema version %d", b.SchemaVersion)
	return s.String()
}

func (a *app) versionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print inboxctl's version and the schema version it needs",
		Long: `version prints the module version this binary was built from (with the vcs
revision, and whether the checkout had uncommitted changes, when built from a
checkout) and the pgbox schema version it needs; 'inboxctl migrate check'
compares that with a database. inboxctl --version prints the same.`,
		Example: `  inboxctl version
  inboxctl version -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b := readBuildInfo()
			if output == formatJSON {
				return writeJSON(a.out, b)
			}
			_, err := fmt.Fprintln(a.out, b)
			return err
		},
	}
	outputFlag(cmd, &output, documentOutput)
	return cmd
}
