package parquetbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// A compaction's outputs become visible through one commit record per
// unit, not when its files appear. A commit is a small JSON object
// <root>/_commits/<table>/<unit>.<generation>, created only if absent
// (O_EXCL-like link on a disk, WriterOptions.IfNotExist on a bucket): a
// compaction reads the unit's newest commit (generation g) before it
// lists the unit's files, names its output files for g+1, and creates
// commit g+1 when they are written. Two compactions that read the same g
// (one paused past its lease, another taking the unit over) both try to
// create g+1; the storage lets one of them, and the other steps back
// (ErrUnitLost) and deletes its files. The lease only keeps compactions
// from doing the same work twice; the commit is what keeps a row from
// being counted twice.
//
// Readers honour the newest commit of each unit:
//   - a compaction output named for a generation (…-g<gen>-w<weight>-…)
//     is read only if that commit lists it; one it does not list is an
//     orphan of a compaction that lost (or crashed before committing),
//     ignored and later removed;
//   - any other file (a log conversion, another writer's file, an output
//     written before commits existed) is read unless the commit lists it
//     as consumed (folded into its outputs, and not removed yet because
//     the compaction stopped in between);
//   - a unit without a commit (every unit of an outbox written before
//     this scheme) reads every file but the generation-named outputs, as
//     before.
//
// A commit that applied retention also keeps, per queue, the latest
// updated_at of a record it dropped: a pending record of that queue and
// of that unit which is older and which the commit's outputs do not hold
// (a writer's late publication, a hung writer's log, a file converted
// again after a crash) can only be an ID's state from before a dropped
// outcome, and is not served. See docs/outbox.md, "Compaction and
// retention".
const commitDir = "_commits"

// commitBody is what a commit object holds. File names are relative to
// the table, as in a listing.
type commitBody struct {
	Gen    uint64    `json:"gen"`
	Holder string    `json:"holder"`
	At     time.Time `json:"at"`
	// Outputs are the generation-named files the unit's readers read.
	Outputs []string `json:"outputs,omitempty"`
	// Consumed are the files folded into the outputs that may still be
	// listed; readers skip them.
	Consumed []string `json:"consumed,omitempty"`
	// Dropped maps a queue to the latest updated_at of the records
	// retention dropped from the unit (over every commit so far).
	Dropped map[string]time.Time `json:"dropped,omitempty"`
}

// unitCommit is a loaded commit, indexed for readers.
type unitCommit struct {
	body     commitBody
	outputs  map[string]bool
	consumed map[string]bool
	// damaged is set when the newest commit could not be read: every
	// file of the unit is then read (a duplicate is folded; nothing is
	// hidden on a guess).
	damaged bool
}

func newUnitCommit(b commitBody) *unitCommit {
	c := &unitCommit{body: b, outputs: make(map[string]bool, len(b.Outputs)), consumed: make(map[string]bool, len(b.Consumed))}
	for _, n := range b.Outputs {
		c.outputs[n] = true
	}
	for _, n := range b.Consumed {
		c.consumed[n] = true
	}
	return c
}

// visible reports whether readers read the file name of a unit whose
// newest commit is c (nil: the unit has none).
func (c *unitCommit) visible(name string) bool {
	_, tagged := outputGen(name)
	switch {
	case c == nil:
		return !tagged
	case c.damaged:
		return true
	case tagged:
		return c.outputs[name]
	}
	return !c.consumed[name]
}

// hides reports whether a record that the commit's outputs do not hold is
// not served: a pending record older than the latest record retention
// dropped from its queue in the unit.
func (c *unitCommit) hides(r *outbox.Record) bool {
	if c == nil || r.Status != outbox.StatusPending {
		return false
	}
	cut, ok := c.body.Dropped[r.Queue]
	return ok && r.UpdatedAt.Before(cut)
}

// commitPrefix is the key prefix of a unit's commits; a bucket's unit
// <partition>/<bucket> is spelled <partition>~<bucket>, as its lease.
func commitPrefix(t outbox.Table, unit unitName) string {
	return path.Join(commitDir, string(t), strings.Replace(unit, "/", "~", 1)) + "."
}

// outputGen returns the generation a compaction output's name carries:
// <bucket->compacted-<micros>-<random>-g<gen>-w<weight>-<seq>.parquet.
func outputGen(name string) (uint64, bool) {
	_, _, rest, _ := splitBucket(path.Base(name))
	stem, ok := strings.CutSuffix(rest, ".parquet")
	if !ok || !strings.HasPrefix(stem, "compacted-") {
		return 0, false
	}
	parts := strings.Split(stem, "-")
	for i := 1; i+1 < len(parts); i++ {
		if g, ok := strings.CutPrefix(parts[i], "g"); ok && strings.HasPrefix(parts[i+1], "w") {
			n, err := strconv.ParseUint(g, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// maxCommitBytes bounds what is read as a commit: a unit's outputs are a
// few files, its consumed inputs at most a day's conversions.
const maxCommitBytes = 16 << 20

// readCommit returns the newest commit of a unit (nil when it has none).
func readCommit(ctx context.Context, s leaseStore, t outbox.Table, unit unitName) (*unitCommit, error) {
	prefix := commitPrefix(t, unit)
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var top uint64
	found := false
	for _, k := range keys {
		if n, err := strconv.ParseUint(strings.TrimPrefix(k, prefix), 10, 64); err == nil && (!found || n > top) {
			top, found = n, true
		}
	}
	if !found {
		return nil, nil
	}
	return getCommit(ctx, s, leaseKey(prefix, top), top)
}

// getCommit reads the commit at key, of generation gen.
func getCommit(ctx context.Context, s leaseStore, key string, gen uint64) (*unitCommit, error) {
	data, err := s.get(ctx, key, maxCommitBytes)
	if err != nil {
		return nil, err
	}
	var b commitBody
	if err := json.Unmarshal(data, &b); err != nil || b.Gen != gen {
		return &unitCommit{body: commitBody{Gen: gen}, damaged: true}, nil
	}
	return newUnitCommit(b), nil
}

// ErrUnitLost is the error (through a *UnitLostError) of a compaction
// that lost its unit to another compaction before it committed: it made
// nothing visible and removed nothing.
var ErrUnitLost = errors.New("compaction lost its unit")

// UnitLostError says that a compaction stepped back from a unit because
// another compaction committed it first (after this one's lease ran out,
// for example while it was paused).
type UnitLostError struct {
	// Table and Unit name the unit (created_date=…, or created_date=…/b3of8).
	Table outbox.Table
	Unit  string
	// Gen is the generation this compaction meant to commit, which
	// another created first.
	Gen uint64
}

// Error says which unit was lost and that nothing changed.
func (e *UnitLostError) Error() string {
	return fmt.Sprintf("lost its lease on unit %s/%s (commit %d was made by another compaction); stepped back: its outputs were discarded and nothing changed", e.Table, e.Unit, e.Gen)
}

// Unwrap makes the error match ErrUnitLost.
func (e *UnitLostError) Unwrap() error { return ErrUnitLost }

// commitView is the newest commit of each unit of a table that has one.
type commitView struct {
	units map[unitName]*unitCommit
	// retained lists, per partition, the units whose commits dropped
	// records by retention.
	retained map[string][]unitName
	// keys are the commits' keys, for reuse by the next load.
	keys map[string]*unitCommit
}

// unit returns the newest commit of a unit (nil: none).
func (v *commitView) unit(u unitName) *unitCommit {
	if v == nil {
		return nil
	}
	return v.units[u]
}

// loadCommits reads the newest commit of every unit of table t, reusing
// the bodies prev read (commits never change once created).
func loadCommits(ctx context.Context, s leaseStore, t outbox.Table, prev *commitView) (*commitView, error) {
	dir := path.Join(commitDir, string(t)) + "/"
	keys, err := s.keys(ctx, dir)
	if err != nil {
		return nil, err
	}
	type top struct {
		key string
		gen uint64
	}
	tops := map[unitName]top{}
	for _, k := range keys {
		name, seq, ok := strings.Cut(strings.TrimPrefix(k, dir), ".")
		if !ok {
			continue
		}
		gen, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			continue
		}
		unit := strings.Replace(name, "~", "/", 1)
		if cur, ok := tops[unit]; !ok || gen > cur.gen {
			tops[unit] = top{key: k, gen: gen}
		}
	}
	v := &commitView{units: make(map[unitName]*unitCommit, len(tops)), retained: map[string][]unitName{}, keys: make(map[string]*unitCommit, len(tops))}
	for unit, tp := range tops {
		var c *unitCommit
		if prev != nil {
			c = prev.keys[tp.key]
		}
		if c == nil {
			c, err = getCommit(ctx, s, tp.key, tp.gen)
			if errors.Is(err, os.ErrNotExist) {
				// Pruned since the listing: a newer one exists.
				c, err = readCommit(ctx, s, t, unit)
			}
			if err != nil {
				return nil, err
			}
			if c == nil {
				continue
			}
		}
		v.units[unit], v.keys[tp.key] = c, c
		if len(c.body.Dropped) > 0 {
			p := unitPartition(unit)
			v.retained[p] = append(v.retained[p], unit)
		}
	}
	return v, nil
}

// hidesRecord reports whether a record not read from a commit's outputs
// (a log's, or a file's the commit does not list) is hidden by the
// retention of a unit that may hold it.
func (v *commitView) hidesRecord(r *outbox.Record) bool {
	if v == nil || r.Status != outbox.StatusPending || len(v.retained) == 0 {
		return false
	}
	part := partitionOf(r)
	for _, unit := range v.retained[part] {
		if b := unitBucket(unit); b != "" && !mayHold(part+"/"+b+"x.parquet", r.ID) {
			continue
		}
		if v.units[unit].hides(r) {
			return true
		}
	}
	return false
}

// sameCommits reports whether two loads found the same commits.
func sameCommits(a, b *commitView) bool {
	if len(a.keys) != len(b.keys) {
		return false
	}
	for k := range a.keys {
		if _, ok := b.keys[k]; !ok {
			return false
		}
	}
	return true
}

// visibleEntries splits the listed entries into those readers read, the
// files visible under the unit's newest commit in a or in b (the same
// commits but when they moved during the listing), and those hidden.
// Entries outside the layout are kept, to be reported.
func visibleEntries(listed []storeEntry, a, b *commitView) (visible, hidden []storeEntry) {
	visible = listed[:0:0]
	for _, e := range listed {
		u := unitOf(e.name)
		if e.skip != nil || a.unit(u).visible(e.name) || b.unit(u).visible(e.name) {
			visible = append(visible, e)
		} else {
			hidden = append(hidden, e)
		}
	}
	return visible, hidden
}

// hiddenIn returns the names of the files of unit the last listing hid.
func (fs *fileSet) hiddenIn(unit unitName) []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []string
	for _, e := range fs.hidden {
		if unitOf(e.name) == unit {
			out = append(out, e.name)
		}
	}
	return out
}

// hider returns the check that hides records of the listed file name
// under its unit's retention (nil when none applies: the file is one of
// the commit's outputs, or its unit dropped nothing).
func (fs *fileSet) hider(name string) func(*outbox.Record) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	c := fs.commits.unit(unitOf(name))
	if c == nil || len(c.body.Dropped) == 0 || c.outputs[name] {
		return nil
	}
	return c.hides
}

// hidesLive reports whether a record from a log (this process's or
// another's) is hidden by the retention of a unit that may hold it.
func (fs *fileSet) hidesLive(r *outbox.Record) bool {
	fs.mu.Lock()
	v := fs.commits
	fs.mu.Unlock()
	return v.hidesRecord(r)
}

// hiddenStream leaves out the records hides hides.
type hiddenStream struct {
	src   recordStream
	hides func(*outbox.Record) bool
}

func (s hiddenStream) next() (outbox.Record, error) {
	for {
		r, err := s.src.next()
		if err != nil || !s.hides(&r) {
			return r, err
		}
	}
}
