package console

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	ctd "github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// healthSnapshot holds the outbox figures that need a pass over every
// record, as of At.
type healthSnapshot struct {
	At        time.Time
	Took      time.Duration
	Computing bool
	Err       string
	Stats     []parquetbox.TableStats
	// Stale holds the oldest stale pending records (at most staleShown)
	// and StaleCount all of them.
	Stale      []outbox.Record
	StaleCount int
	Samples    []sample
}

// sample is the count of IDs by status at one moment.
type sample struct {
	At       time.Time
	ByStatus map[string]int64
}

const (
	staleShown = 50
	maxSamples = 60
)

// healthCache recomputes the snapshot in the background when a page asks
// for one older than Config.HealthEvery (or ten times the last pass's
// length, if more), so no request waits for a pass over a large outbox:
// the page shows the last snapshot and says its age. Nothing is computed
// while nobody looks at the page.
type healthCache struct {
	ctx  context.Context
	box  store
	cfg  Config
	done sync.WaitGroup

	mu      sync.Mutex
	snap    healthSnapshot
	running bool
}

func newHealthCache(ctx context.Context, box store, cfg Config) *healthCache {
	return &healthCache{ctx: ctx, box: box, cfg: cfg}
}

// get returns the current snapshot, starting a refresh if it is due.
func (h *healthCache) get() healthSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	// A pass over a large outbox takes long (about 20 s for 5.5M rows on
	// two cores): wait at least ten times its length between passes, so
	// the console never spends more than a tenth of its time on it.
	every := max(h.cfg.HealthEvery, 10*h.snap.Took)
	if !h.running && h.ctx.Err() == nil && (h.snap.At.IsZero() || h.cfg.Clock.Since(h.snap.At) >= every) {
		h.running = true
		h.done.Add(1)
		go h.refresh()
	}
	snap := h.snap
	snap.Computing = h.running
	return snap
}

// wait blocks until no refresh is running.
func (h *healthCache) wait() { h.done.Wait() }

func (h *healthCache) refresh() {
	defer h.done.Done()
	start := h.cfg.Clock.Now()
	snap := healthSnapshot{At: start}
	stats, err := h.box.stats(h.ctx)
	if err == nil {
		// A dispatcher's outbox has no deliveries (workers record them
		// in their own); an empty table there is no news.
		snap.Stats = slices.DeleteFunc(stats, func(st parquetbox.TableStats) bool {
			return st.Table == outbox.TableDeliveries && st.Absent()
		})
		for _, t := range outbox.Tables() {
			if t == outbox.TableDeliveries {
				continue // nothing re-drives a delivery: never pending
			}
			var recs []outbox.Record
			if recs, err = h.box.Pending(h.ctx, t, h.cfg.StaleAfter); err != nil {
				break
			}
			snap.StaleCount += len(recs)
			snap.Stale = append(snap.Stale, recs...)
		}
	}
	sort.Slice(snap.Stale, func(i, j int) bool { return snap.Stale[i].UpdatedAt.Before(snap.Stale[j].UpdatedAt) })
	snap.Stale = snap.Stale[:min(len(snap.Stale), staleShown)]
	if err != nil {
		snap.Err = err.Error()
	}
	snap.Took = h.cfg.Clock.Since(start)
	h.mu.Lock()
	defer h.mu.Unlock()
	samples := h.snap.Samples
	if err == nil {
		byStatus := map[string]int64{}
		for _, t := range stats {
			for st, n := range t.ByStatus {
				byStatus[st] += n
			}
		}
		samples = append(samples, sample{At: start, ByStatus: byStatus})
		samples = samples[max(0, len(samples)-maxSamples):]
	}
	snap.Samples = samples
	h.snap, h.running = snap, false
}

// tableFiles counts a table's Parquet files per partition directory.
type tableFiles struct {
	Table      outbox.Table
	Partitions []partition
	Files      int
	Bytes      int64
}

type partition struct {
	Dir   string
	Files int
	Bytes int64
	// Other counts files that are neither Parquet nor hidden work files.
	Other int
}

// schemaDir is the directory, in a partition of its own, of the file with
// a table's columns and no rows that every outbox opened for writing holds
// (see package parquetbox): not data, so not shown.
const schemaDir = "_schema"

// listFiles walks each table directory and groups files by the directory
// they sit in, so that entries outside the layout (files directly under a
// table, other directories) show where they are too. A directory it cannot
// read is left out here; the outbox reports it among the skipped entries.
func listFiles(root string) ([]tableFiles, error) {
	var out []tableFiles
	for _, t := range outbox.Tables() {
		tf := tableFiles{Table: t}
		parts := map[string]*partition{}
		dir := filepath.Join(root, string(t))
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == dir && !os.IsNotExist(err) {
					return err
				}
				return fs.SkipDir // no table yet, or a directory this process cannot read
			}
			if d.IsDir() && d.Name() == schemaDir && filepath.Dir(filepath.Dir(p)) == dir {
				return fs.SkipDir
			}
			if d.IsDir() || strings.HasPrefix(d.Name(), ".") {
				return nil
			}
			rel, _ := filepath.Rel(dir, filepath.Dir(p))
			if rel == "." {
				rel = "(top level)"
			}
			part := parts[rel]
			if part == nil {
				part = &partition{Dir: filepath.ToSlash(rel)}
				parts[rel] = part
			}
			if !strings.HasSuffix(d.Name(), ".parquet") {
				part.Other++
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil // removed by a compaction since the listing
			}
			part.Files++
			part.Bytes += info.Size()
			tf.Files++
			tf.Bytes += info.Size()
			return nil
		})
		if err != nil {
			return out, err
		}
		if t == outbox.TableDeliveries && len(parts) == 0 {
			continue // a dispatcher's outbox: workers record deliveries in their own
		}
		for _, p := range parts {
			tf.Partitions = append(tf.Partitions, *p)
		}
		sort.Slice(tf.Partitions, func(i, j int) bool { return tf.Partitions[i].Dir < tf.Partitions[j].Dir })
		out = append(out, tf)
	}
	return out, nil
}

// recoverStale runs one recovery pass with a dispatcher of its own (a new
// processor UUID, so the hand-over shows in the audit trail).
func (s *Server) recoverStale(ctx context.Context) (string, error) {
	if s.client == nil || s.box == nil {
		return "", &pageError{code: http.StatusNotFound, msg: "recover needs both an emulator and an outbox"}
	}
	d, err := s.box.dispatcher(ctx, &ctd.Config{
		Project: "unused", Location: "unused", Queue: "unused", // the records name their queues
		EmulatorAddr: s.cfg.Emulator, Logger: s.cfg.Logger, StaleAfter: s.cfg.StaleAfter,
	})
	if err != nil {
		return "", err
	}
	st, err := d.Recover(ctx)
	if cerr := d.Close(context.Background()); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return formatRecover(st), nil
}

func formatRecover(st ctd.RecoverStats) string {
	return fmt.Sprintf("recover: %d stale, %d found (already_existed), %d not found (not_found), %d taken over, %d errors",
		st.Stale, st.Found, st.NotFound, st.HandedOver, st.Errors)
}
