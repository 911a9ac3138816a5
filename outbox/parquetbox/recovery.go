package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// recover converts the segments of this processor and of dead processors
// into Parquet files, and picks the next free segment number.
func (o *Outbox) recover(ctx context.Context) error {
	segs, err := listSegments(o.walDir)
	if err != nil {
		return fmt.Errorf("outbox: list %s: %w", o.walDir, err)
	}
	byProc := map[string][]walSegment{}
	var procs []string
	for _, s := range segs {
		if _, ok := byProc[s.Processor]; !ok {
			procs = append(procs, s.Processor)
		}
		byProc[s.Processor] = append(byProc[s.Processor], s)
		if s.Processor == o.processor && s.Seq >= o.nextSeq {
			o.nextSeq = s.Seq + 1
		}
	}
	for _, t := range outbox.Tables() {
		entries, err := o.store.list(ctx, t)
		if err != nil {
			return fmt.Errorf("outbox: list %s: %w", o.store.where(t, ""), err)
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(path.Base(e.name), ".parquet")
			if !ok {
				continue
			}
			if p, seq, ok := parseSegmentName(name + walExt); ok && p == o.processor && seq >= o.nextSeq {
				o.nextSeq = seq + 1
			}
		}
	}
	for _, p := range procs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == o.processor {
			if err := o.adopt(ctx, byProc[p]); err != nil {
				return err
			}
			continue
		}
		lock, held, err := tryLock(filepath.Join(o.walDir, p+lockExt), false)
		if err != nil {
			o.log.Warn("outbox: cannot check processor liveness", "processor", p, "err", err)
			continue
		}
		if held {
			continue // alive: its segments are read live, never adopted
		}
		err = o.adopt(ctx, byProc[p])
		if lock != nil {
			if err == nil {
				os.Remove(o.announcePath(p))
				os.Remove(lock.Name())
			}
			lock.Close()
		}
		if err != nil {
			return err
		}
		o.log.Info("outbox: replayed log of a stopped processor", "processor", p, "segments", len(byProc[p]))
	}
	return nil
}

// adopt turns segments into Parquet files named after them and removes
// them. A torn tail is dropped and logged; an unreadable segment is logged
// and left in place.
func (o *Outbox) adopt(ctx context.Context, segs []walSegment) error {
	for _, s := range segs {
		recs, end, err := readFrames(s.Path, 0)
		var te *tailError
		switch {
		case errors.As(err, &te):
			o.log.Warn("outbox: dropped torn log tail", "path", s.Path, "offset", te.Offset, "bytes", te.Bytes, "reason", te.Reason)
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			o.log.Warn("outbox: skipped log segment", "path", s.Path, "err", err)
			continue
		}
		_ = end
		if err := o.writeSegmentParquet(ctx, s.Processor, s.Seq, [][]outbox.Record{recs}); err != nil {
			return err
		}
		if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("outbox: remove %s: %w", s.Path, err)
		}
	}
	return syncDir(o.walDir)
}
