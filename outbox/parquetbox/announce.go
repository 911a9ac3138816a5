package parquetbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/wal"
)

var _ outbox.Announcer = (*Outbox)(nil)

// maxAnnouncementBytes bounds what is read as an announcement: a few
// hundred bytes of JSON in practice.
const maxAnnouncementBytes = 64 << 10

// Announce writes p to <log dir>/wal/<processor>.json, beside the
// processor's lock, where every process sharing the log directory reads
// it (on a bucket, only those on this machine that share LogDir). It is
// written under a temporary name and renamed, so a reader sees it whole;
// Close removes it. An outbox opened ReadOnly has no processor and
// announces nothing (ErrReadOnly).
func (o *Outbox) Announce(ctx context.Context, p outbox.Process) error {
	if o.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := o.checkOpen(); err != nil {
		return err
	}
	if p.ProcessorUUID != o.processor {
		return fmt.Errorf("outbox: announce: processor %q is not this outbox's (%s); a process announces only itself", p.ProcessorUUID, o.processor)
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	w, err := createAtomic(o.announcePath(o.processor))
	if err == nil {
		if _, err = w.Write(append(data, '\n')); err != nil {
			w.abort()
		} else {
			err = w.commit()
		}
	}
	if err != nil {
		return fmt.Errorf("outbox: announce processor %s: %w", o.processor, err)
	}
	return nil
}

func (o *Outbox) announcePath(processor string) string {
	return filepath.Join(o.walDir, processor+wal.AnnounceExt)
}

// Announced reads the announcements in the log directory and returns
// those of live processors: this one, and those whose lock is held. One
// whose processor is gone is skipped (and removed, unless this outbox is
// ReadOnly); one that cannot be read or parsed is logged and skipped.
func (o *Outbox) Announced(ctx context.Context) ([]outbox.Process, error) {
	if err := o.checkOpen(); err != nil {
		return nil, err
	}
	if _, local := o.store.(localStore); !local && o.opts.LogDir == "" {
		return nil, nil // a bucket read without a log directory on this machine
	}
	entries, err := os.ReadDir(o.walDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: read announcements in %s: %w", o.walDir, err)
	}
	var out []outbox.Process
	for _, e := range entries {
		proc, ok := strings.CutSuffix(e.Name(), wal.AnnounceExt)
		if !ok || strings.HasPrefix(proc, ".") || !e.Type().IsRegular() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if proc != o.processor && !o.alive(proc) {
			if !o.opts.ReadOnly {
				os.Remove(o.announcePath(proc))
			}
			continue
		}
		p, err := readAnnouncement(o.announcePath(proc))
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // its processor closed since the listing
		case err != nil:
			o.log.Warn("outbox: skipped announcement", "path", o.announcePath(proc), "err", err)
			continue
		case p.ProcessorUUID != proc:
			o.log.Warn("outbox: skipped announcement", "path", o.announcePath(proc), "err",
				fmt.Sprintf("names processor %q, not the one of its file name", p.ProcessorUUID))
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProcessorUUID < out[j].ProcessorUUID })
	return out, nil
}

// alive reports whether another processor holds its lock. Where locks
// cannot be tested, every processor is taken to be alive.
func (o *Outbox) alive(proc string) bool {
	lock, held, err := tryLock(filepath.Join(o.walDir, proc+lockExt), false)
	if lock != nil {
		lock.Close()
	}
	return held || err != nil
}

func readAnnouncement(path string) (outbox.Process, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return outbox.Process{}, err
	}
	defer f.Close()
	if st.Size() > maxAnnouncementBytes {
		return outbox.Process{}, tooLarge(st.Size(), maxAnnouncementBytes)
	}
	var p outbox.Process
	if err := json.NewDecoder(f).Decode(&p); err != nil {
		return outbox.Process{}, fmt.Errorf("not an announcement: %w", err)
	}
	return p, nil
}
