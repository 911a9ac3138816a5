package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// incompleteError says an answer was printed but may miss records, because
// files of the outbox were skipped (exit 3).
type incompleteError struct {
	skipped []*parquetbox.FileError
	// prefix is what else went wrong, if anything ("no record with …").
	prefix string
	// compaction marks the error of compact, which skipped what it did
	// not fold rather than answering.
	compaction bool
}

func (e *incompleteError) Error() string {
	var b strings.Builder
	if e.prefix != "" {
		b.WriteString(e.prefix + "; ")
	}
	what := "the answer may be incomplete"
	if e.compaction {
		what = "compaction is incomplete"
	}
	outside := false
	for _, f := range e.skipped {
		outside = outside || errors.Is(f, parquetbox.ErrOutsideLayout)
	}
	if outside {
		fmt.Fprintf(&b, "%s: %d %s skipped (damaged, foreign or outside the table layout):", what, len(e.skipped), plural(len(e.skipped), "entry", "entries"))
	} else {
		fmt.Fprintf(&b, "%s: %d %s skipped (damaged or foreign):", what, len(e.skipped), plural(len(e.skipped), "file", "files"))
	}
	for i, f := range e.skipped {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s (%s)", f.Path, f.Reason)
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// skippedJSON is the --format json line that lists one skipped file (or
// directory, outside the table layout), after the answer's own lines.
type skippedJSON struct {
	SkippedFile string `json:"skipped_file,omitempty"`
	SkippedDir  string `json:"skipped_dir,omitempty"`
	Reason      string `json:"reason"`
	Damaged     bool   `json:"damaged"`
}

// reportSkipped writes the skipped files as JSON lines when asJSON, and
// returns the error that makes the command exit 3 (nil when none).
func reportSkipped(w io.Writer, asJSON bool, skipped []*parquetbox.FileError, prefix string) error {
	if len(skipped) == 0 {
		if prefix != "" {
			return errors.New(prefix)
		}
		return nil
	}
	if asJSON {
		enc := json.NewEncoder(w)
		for _, f := range skipped {
			if err := enc.Encode(skippedLine(f)); err != nil {
				return err
			}
		}
	}
	return &incompleteError{skipped: skipped, prefix: prefix}
}

// skippedLine is the JSON line of one skipped entry.
func skippedLine(f *parquetbox.FileError) skippedJSON {
	line := skippedJSON{SkippedFile: f.Path, Reason: f.Reason, Damaged: errors.Is(f, parquetbox.ErrDamaged)}
	if f.Dir {
		line.SkippedFile, line.SkippedDir = "", f.Path
	}
	if f.Err != nil && line.Damaged {
		line.Reason += ": " + f.Err.Error()
	}
	return line
}
