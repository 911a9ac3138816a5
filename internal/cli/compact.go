package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// progressBar draws one self-overwriting line on a terminal, at most ten
// times a second.
type progressBar struct {
	w    io.Writer
	mu   sync.Mutex
	last time.Time
	now  func() time.Time
}

func (p *progressBar) update(t outbox.Table, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.now(); done < total && now.Sub(p.last) < 100*time.Millisecond {
		return
	} else {
		p.last = now
	}
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	n := int(frac * width)
	fmt.Fprintf(p.w, "\rcompacting %-15s [%s%s] %3.0f%% %d/%d rows", t,
		strings.Repeat("#", n), strings.Repeat(" ", width-n), 100*frac, done, total)
}

func (p *progressBar) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.last.IsZero() {
		fmt.Fprintln(p.w)
	}
}

// isTerminal reports whether w is a terminal, where a progress bar helps
// rather than litters a log.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newCompactCmd(env *Env) *cobra.Command {
	var dir, retention string
	cmd := &cobra.Command{
		Use:   "compact --outbox DIR [--retention QUEUE=DURATION,...]",
		Short: "Merge the outbox's files into one sorted file per table, applying retention",
		Long: `Merge the outbox's files into one sorted file per table, applying retention.

Each ID keeps only its latest state (its history is folded), rows are sorted
by ID, and terminal records (created, already_existed, failed, cancelled)
older than their queue's retention are dropped; pending records never are.
Logs left by stopped dispatchers are converted first. Running dispatchers
keep appending meanwhile, and an interrupted compaction leaves the outbox as
it was.

--retention takes queue=duration pairs; the queue is its ID or its full
resource name, and * stands for every other queue. A duration is a number of
days (7d), a Go duration (36h) or 0 (drop terminal records now). Without
--retention nothing is dropped.

A progress bar is drawn on stderr when it is a terminal.`,
		Example: `  ctdispatch compact --outbox ./outbox
  ctdispatch compact --outbox ./outbox --retention orders=7d,audit=30d,*=90d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ret, err := outbox.ParseRetention(retention)
			if err != nil {
				return usagef("--retention: %v", err)
			}
			ctx := cmd.Context()
			o, err := openOutbox(ctx, env, dir, false)
			if err != nil {
				return err
			}
			defer o.Close()
			opts := outbox.CompactOptions{Retention: ret}
			var bar *progressBar
			if isTerminal(env.Err) {
				bar = &progressBar{w: env.Err, now: time.Now}
				opts.Progress = bar.update
			}
			stats, err := o.Compact(ctx, opts)
			if bar != nil {
				bar.finish()
			}
			w := cmd.OutOrStdout()
			for _, s := range stats.Tables {
				fmt.Fprintf(w, "%s: %d files, %d rows, %d bytes -> %d files, %d rows, %d bytes; %d dropped by retention\n",
					s.Table, s.FilesIn, s.RowsIn, s.BytesIn, s.FilesOut, s.RowsOut, s.BytesOut, s.Dropped)
			}
			if err != nil {
				return err
			}
			return o.Close()
		},
	}
	cmd.Flags().StringVar(&dir, "outbox", "", "outbox directory (required)")
	cmd.Flags().StringVar(&retention, "retention", "", "per-queue retention of terminal records, e.g. orders=7d,*=30d")
	return cmd
}
