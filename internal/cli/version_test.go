package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatVersion(t *testing.T) {
	t.Parallel()
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.time", Value: "2026-11-25T10:00:00Z"}}
	tests := []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"checkout", "(devel)", rev, "(devel), revision 0123456789abcdef0123456789abcdef01234567, committed 2026-11-25T10:00:00Z, go1.26.8"},
		{"modified checkout", "", append(rev[:1:1], debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "(devel), revision 0123456789abcdef0123456789abcdef01234567 (modified), go1.26.8"},
		{"devel without VCS", "(devel)", nil, "(devel), revision unknown, go1.26.8"},
		{"installed from the module proxy", "v0.4.0", nil, "v0.4.0, go1.26.8"},
	}
	for _, tt := range tests {
		info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: tt.version}, Settings: tt.settings}
		require.Equal(t, tt.want, formatVersion(info), tt.name)
	}
}
