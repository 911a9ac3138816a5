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
}

func (e *incompleteError) Error() string {
	var b strings.Builder
	if e.prefix != "" {
		b.WriteString(e.prefix + "; ")
	}
	fmt.Fprintf(&b, "the answer may be incomplete: %d %s skipped (damaged or foreign):", len(e.skipped), plural(len(e.skipped), "file", "files"))
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

// skippedFiles lists the files the outbox skipped while answering: the one
// place the query and stats commands learn about them.
func skippedFiles(o *parquetbox.Outbox) []*parquetbox.FileError { return o.Damaged() }

// skippedJSON is the --format json line that lists one skipped file, after
// the answer's own lines.
type skippedJSON struct {
	SkippedFile string `json:"skipped_file"`
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
			reason := f.Reason
			if f.Err != nil && errors.Is(f, parquetbox.ErrDamaged) {
				reason += ": " + f.Err.Error()
			}
			if err := enc.Encode(skippedJSON{SkippedFile: f.Path, Reason: reason, Damaged: errors.Is(f, parquetbox.ErrDamaged)}); err != nil {
				return err
			}
		}
	}
	return &incompleteError{skipped: skipped, prefix: prefix}
}
