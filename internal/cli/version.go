package cli

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionString describes this binary from the build information the Go
// toolchain embeds: the module version ("(devel)" for a build from a
// checkout), the VCS revision and whether the tree was modified (a devel
// build without one says "revision unknown"; a binary installed from the
// module proxy has a version and no revision), and the Go version.
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown: built without module support)"
	}
	return formatVersion(info)
}

func formatVersion(info *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	parts := []string{info.Main.Version}
	if parts[0] == "" {
		parts[0] = "(devel)"
	}
	if rev := settings["vcs.revision"]; rev != "" {
		r := "revision " + rev
		if settings["vcs.modified"] == "true" {
			r += " (modified)"
		}
		parts = append(parts, r)
	} else if parts[0] == "(devel)" {
		// A released version names its source; a devel build without VCS
		// information names nothing, and says so.
		parts = append(parts, "revision unknown")
	}
	if t := settings["vcs.time"]; t != "" {
		parts = append(parts, "committed "+t)
	}
	parts = append(parts, info.GoVersion)
	return strings.Join(parts, ", ")
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision of this binary",
		Long: `Print the module version and VCS revision of this binary, from the build
information the Go toolchain embeds (the same as ctdispatch --version).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "ctdispatch %s\n", versionString())
			return err
		},
	}
}
