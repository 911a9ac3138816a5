package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctdispatch/ctdispatch/internal/pause"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

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
		p.last = time.Time{}
	}
}

// printTableTotals writes what was skipped or kept in a table, and its
// totals.
func printTableTotals(w io.Writer, s parquetbox.TableCompaction) {
	if s.Table == outbox.TableDeliveries && s.FilesIn == 0 && len(s.Partitions) == 0 && len(s.Skipped) == 0 && len(s.Kept) == 0 {
		return // a dispatcher's outbox: workers record deliveries in their own
	}
	for _, fe := range fileErrors(s.Skipped) {
		fmt.Fprintf(w, "%s: skipped %s: %s\n", s.Table, fe.Path, fe.Reason)
	}
	for _, k := range s.Kept {
		fmt.Fprintf(w, "%s: kept %s: it holds rows this system did not write\n", s.Table, k)
	}
	fmt.Fprintf(w, "%s: %d files, %d rows, %d bytes -> %d files, %d rows, %d bytes; %d dropped by retention\n",
		s.Table, s.FilesIn, s.RowsIn, s.BytesIn, s.FilesOut, s.RowsOut, s.BytesOut, s.Dropped)
	if line := manifestLine(s.Table, s.Manifest); line != "" {
		fmt.Fprintln(w, line)
	}
}

// fileErrors returns the files a compaction skipped, each a
// *parquetbox.FileError.
func fileErrors(errs []error) []*parquetbox.FileError {
	out := make([]*parquetbox.FileError, 0, len(errs))
	for _, err := range errs {
		var fe *parquetbox.FileError
		if errors.As(err, &fe) {
			out = append(out, fe)
		}
	}
	return out
}

// manifestLine says what compaction did with a table's manifest ("" when
// the table has nothing for one to list).
func manifestLine(t outbox.Table, m parquetbox.ManifestRefresh) string {
	switch m.Action {
	case parquetbox.ManifestWritten:
		return fmt.Sprintf("%s: manifest written: %d files, %d row groups (%s)", t, m.Files, m.RowGroups, m.Path)
	case parquetbox.ManifestCurrent:
		if m.Files == 0 {
			return ""
		}
		return fmt.Sprintf("%s: manifest up to date: %d files, %d row groups", t, m.Files, m.RowGroups)
	case parquetbox.ManifestFailed:
		return fmt.Sprintf("%s: manifest not written (lookups open every file instead): %v", t, m.Err)
	}
	return ""
}

// partitionLine says what compaction did with one unit: a partition, or
// one bucket of it.
func partitionLine(t outbox.Table, p parquetbox.UnitCompaction) string {
	where := string(t) + "/" + p.Partition
	if p.Bucket != "" {
		where += " " + p.Bucket
	}
	switch p.Action {
	case parquetbox.UnitUntouched:
		return fmt.Sprintf("%s: untouched: %s", where, p.Reason)
	case parquetbox.UnitBusy:
		return fmt.Sprintf("%s: busy, skipped: %s", where, p.Reason)
	case parquetbox.UnitLost:
		return fmt.Sprintf("%s: lost, stepped back: %s", where, p.Reason)
	case parquetbox.UnitDropped:
		return fmt.Sprintf("%s: dropped: all %d rows past retention; %d files, %d bytes removed", where, p.RowsIn, p.FilesIn, p.BytesIn)
	}
	line := fmt.Sprintf("%s: %s: %d files, %d rows, %d bytes -> %d files, %d rows, %d bytes; %d dropped by retention",
		where, p.Action, p.FilesIn, p.RowsIn, p.BytesIn, p.FilesOut, p.RowsOut, p.BytesOut, p.Dropped)
	if p.ForeignRows > 0 {
		line += fmt.Sprintf("; %d foreign rows left out", p.ForeignRows)
	}
	merge := "tiered"
	if p.Full {
		merge = "full"
	}
	line += fmt.Sprintf("; runs %d -> %d (%s)", p.RunsBefore, p.RunsAfter, merge)
	return line
}

// parseSize reads a byte size: a number with an optional KiB, MiB or GiB.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 {
			break
		}
		return n * u.mul, nil
	}
	return 0, fmt.Errorf("size %q: want a positive number of bytes, KiB, MiB or GiB (256MiB)", s)
}

// isTerminal reports whether w is a terminal, where a progress bar helps
// rather than litters a log.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newCompactCmd(env *Env) *cobra.Command {
	var dir, retention, target string
	var leaseTTL, every time.Duration
	var full bool
	var ice icebergFlags
	cmd := &cobra.Command{
		Use:   "compact --outbox DIR [--retention QUEUE=DURATION,...] [--target-size SIZE] [--full] [--iceberg [--iceberg-catalog URI] | --no-iceberg] [--every[=DURATION]]",
		Short: "Merge each unit's runs of similar size into sorted files, applying retention",
		Long: `Merge each unit's runs of similar size into sorted files, applying retention.

Tables are partitioned by the UTC day each ID was first recorded
(created_date=YYYY-MM-DD), and a day's files by hash bucket of the ID's
task (b3of8-… in file names): a bucket of a day is a unit. Within
a unit, each converted log segment is a run, and so is the output of each
merge; runs merge size-tiered, four of a tier into one of the next, so a
row is rewritten about log4(runs) times over a day rather than at every
compaction, and a past day keeps at most ceil(log4 segments)+1 runs
(--full folds every unit into one run now). A merge writes files sorted
by ID of at most --target-size each; each ID keeps only its latest state
(its history is folded), and terminal records (created, already_existed,
failed, cancelled) older than their queue's retention are dropped, only
by a merge of every run of their unit; pending records never are. A unit
whose runs are within the tiers' bounds is left untouched; one whose every
row is past retention is removed whole. Logs left by stopped dispatchers
are converted first. Running dispatchers keep appending meanwhile, and an
interrupted compaction leaves the outbox as it was.

Each unit is compacted under a lease (a small object under _leases/ in
the outbox): a unit another compaction holds is reported busy and
skipped, so two compactions started together share a day's units, and a
crashed compaction's lease expires after --lease-ttl (10 minutes). What
makes a compaction's outputs visible is its commit record (under
_commits/ in the outbox), created only if absent, one generation after the
commit it read before listing the unit: a compaction that was stopped past
its lease while another took the unit over and committed cannot create
its own; it discards its outputs, changes nothing, prints "lost, stepped
back" for the unit, and exits with status 4 after an error line "lost its
lease on unit TABLE/UNIT …; stepped back". So overlapping compactions
never count a row twice, nor bring back what the other one's retention
dropped.

Last, each table's manifest (_manifests/<table> in the outbox) is
written or found up to date: it lists every file with its row groups' ID
bounds and where their bloom filters lie, so that query --dispatch-id and
--cloud-task-id open only the files that may hold the ID. Files written
after it are read as usual; it is never trusted over the files.

One line per unit says what was done (compacted, untouched, dropped,
busy) and, for a merge, its runs before and after, then what was skipped
(damaged or foreign files, and entries outside the layout: files directly
under a table, directories that are not created_date=YYYY-MM-DD, symbolic
links, partitions the process cannot read), files kept because they hold
foreign rows, a total per table, and what became of its manifest. When
anything was skipped the exit status is 3, as for query and stats: what
it holds was not compacted. When a unit was lost (above) the exit status
is 4 and the compaction stops there; run it again.

Iceberg publication (docs/outbox.md, "Publishing as Iceberg"): --iceberg
turns it on for the outbox, which remembers it (in _iceberg/publication.json)
so that every later compact, and export onto it, publishes without the
flag. Each run then ends by making each table's current Iceberg snapshot
name exactly the files the outbox's readers read, in one commit per table
(an append, or one replace of what the compaction folded by its outputs),
verified after it lands, under a lease of its own (_iceberg/leases/): a
table another run is publishing is reported busy. While publication is on,
compaction leaves the files it folds on storage; a run removes them once no
snapshot younger than --iceberg-grace (1h) names them, so a query that
started on a snapshot finds every file it names. --iceberg-catalog chooses
the catalog, recorded with the grace: by default the file-based one under
_iceberg/ (a directory outbox only); postgres://… the SQL catalog on
PostgreSQL (its tables in the schema the URL's search_path names; the
password is not recorded: give it in $PGPASSWORD or ~/.pgpass, or give the
flag again); http(s)://… a REST catalog. A bucket outbox needs one of the
last two, and --iceberg without it is refused before anything changes.
--no-iceberg turns publication off: compaction removes what it folds again,
and the Iceberg metadata stays where it is, no longer kept current. One
line per table says what was published ("iceberg: appended", "replaced",
"current", "busy").

--every DURATION keeps running: a round (compaction, then publication)
every DURATION from the previous round's start, until SIGTERM or SIGINT,
which end it after the round in progress with status 0. --every alone is
every 15s: with dispatchers at the default --publish-interval (30s), a
record is then readable through the Iceberg tables within about 50 s. Its
rounds leave out the units they left untouched; a round that fails is
reported on stderr and the next one runs.

--retention takes queue=duration pairs; the queue is its ID or its full
resource name, and * stands for every other queue. A duration is a number of
days (7d), a Go duration (36h) or 0 (drop terminal records now). Without
--retention nothing is dropped.

A progress bar is drawn on stderr when it is a terminal.`,
		Example: `  ctdispatch compact --outbox ./outbox
  ctdispatch compact --outbox ./outbox --retention orders=7d,audit=30d,*=90d
  ctdispatch compact --outbox ./outbox --iceberg --every`,
		Args: everyArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := notForPostgres("compact", dir, `PostgreSQL keeps its own storage; delete finished records with "ctdispatch retain"`); err != nil {
				return err
			}
			ret, err := parquetbox.ParseRetention(retention)
			if err != nil {
				return usagef("--retention: %v", err)
			}
			looping := cmd.Flags().Changed("every")
			if looping && every < time.Second {
				return usagef("--every %s is below the minimum 1s", every)
			}
			ctx := cmd.Context()
			limitOutboxMemory(env)
			o, err := openOutbox(ctx, env, dir, false)
			if err != nil {
				return err
			}
			defer o.Close()
			targetBytes, err := parseSize(target)
			if err != nil {
				return usagef("--target-size: %v", err)
			}
			if leaseTTL < time.Second {
				return usagef("--lease-ttl %s is below the minimum 1s", leaseTTL)
			}
			pub, err := ice.resolve(ctx, env, o, dir)
			if err != nil {
				return err
			}
			c := compaction{env: env, w: cmd.OutOrStdout(), o: o, pub: pub,
				opts: parquetbox.CompactConfig{Retention: ret, TargetFileBytes: targetBytes, LeaseTTL: leaseTTL, Full: full}}
			if !looping {
				if err := c.round(ctx, false); err != nil {
					return err
				}
				return o.Close()
			}
			compactEvery(ctx, every, env.Err, func(ctx context.Context) error { return c.round(ctx, true) })
			return o.Close()
		},
	}
	cmd.Flags().StringVar(&dir, "outbox", "", "outbox directory (required)")
	cmd.Flags().StringVar(&retention, "retention", "", "per-queue retention of terminal records, e.g. orders=7d,*=30d")
	cmd.Flags().StringVar(&target, "target-size", "256MiB", "size past which a partition's output goes on in another file (KiB, MiB, GiB)")
	cmd.Flags().DurationVar(&leaseTTL, "lease-ttl", 10*time.Minute, "how long a unit's lease, and a table's publication lease, outlive a crashed compaction (a running one renews them)")
	cmd.Flags().BoolVar(&full, "full", false, "fold every run of each unit into one, instead of merging runs of similar size")
	cmd.Flags().DurationVar(&every, "every", 0, "keep running: compact (and publish) every DURATION until SIGTERM or SIGINT, which end it after the round in progress; --every alone is every "+defaultEvery.String())
	cmd.Flags().Lookup("every").NoOptDefVal = defaultEvery.String()
	ice.register(cmd.Flags())
	return cmd
}

// compaction is one compact command's work: each round compacts the
// outbox and, when its root publishes Iceberg tables, publishes them.
type compaction struct {
	env  *Env
	w    io.Writer
	o    *parquetbox.Outbox
	opts parquetbox.CompactConfig
	// pub is the publication the command was started with (nil: none);
	// each round looks again at the root's switch, which another
	// command may have turned since.
	pub *lakeConfig
}

// round compacts once and publishes. quiet leaves out the units left
// untouched, which a round of compact --every would otherwise repeat.
func (c *compaction) round(ctx context.Context, quiet bool) error {
	w := c.w
	opts := c.opts
	var bar *progressBar
	var skipped []*parquetbox.FileError
	trace := &parquetbox.CompactTrace{
		Unit: func(t outbox.Table, p parquetbox.UnitCompaction) {
			if bar != nil {
				bar.finish()
			}
			if quiet && p.Action == parquetbox.UnitUntouched {
				return
			}
			fmt.Fprintln(w, partitionLine(t, p))
		},
		// Each table's totals follow its partitions.
		Table: func(st parquetbox.TableCompaction) {
			if bar != nil {
				bar.finish()
			}
			if !quiet || st.FilesIn > 0 || len(st.Skipped) > 0 || st.Dropped > 0 {
				printTableTotals(w, st)
			}
			skipped = append(skipped, fileErrors(st.Skipped)...)
		},
	}
	if isTerminal(c.env.Err) && !quiet {
		bar = &progressBar{w: c.env.Err, now: time.Now}
		trace.Progress = bar.update
	}
	opts.Trace = trace
	if pause.Armed(pause.CompactCommit) {
		// $CTDISPATCH_PAUSE: the chaos suite and the fence tests
		// stop this process before a unit's commit.
		opts.BeforeCommit = func(context.Context) { pause.Point(pause.CompactCommit) }
	}
	// A compaction that lost a unit stepped back from it and changed
	// nothing there: what is live is still published, then the loss
	// is reported (exit 4).
	lost := c.o.Compact(ctx, opts)
	if lost != nil && !errors.Is(lost, parquetbox.ErrUnitLost) {
		return lost
	}
	pub, err := c.publication(ctx)
	if err != nil {
		return errors.Join(lost, err)
	}
	if pub != nil {
		if err := publish(ctx, w, c.o, *pub); err != nil {
			return errors.Join(lost, err)
		}
	}
	if lost != nil {
		return lost
	}
	if len(skipped) > 0 {
		return &incompleteError{skipped: skipped, compaction: true}
	}
	return nil
}

// publication is the publication this round makes: the root's switch as
// it is now, with the catalog the command was given when it is the one
// recorded (its password).
func (c *compaction) publication(ctx context.Context) (*lakeConfig, error) {
	cfg, on, err := publishedConfig(ctx, c.env, c.o)
	if err != nil || !on {
		return nil, err
	}
	if c.pub != nil && redactCatalog(c.pub.Catalog) == cfg.Catalog {
		cfg.Catalog = c.pub.Catalog
	}
	// A table's publication is leased as long as a unit's compaction.
	cfg.LeaseTTL = c.opts.LeaseTTL
	return &cfg, nil
}
