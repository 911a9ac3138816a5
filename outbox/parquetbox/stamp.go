package parquetbox

import (
	"errors"
	"os"
	"path/filepath"
	"time"
)

// A directory's change time moves whenever an entry is created, removed or
// renamed in it (a file written in place leaves it alone), and nobody can
// set it by hand. So a look at the log directory or at a table's
// directories can be skipped when a stat of each shows the stamps of the
// last listing: no segment, publication, commit or manifest was added or
// removed since. One catch: the filesystem stamps times from a clock that
// ticks coarsely (a kernel tick, up to 10 ms; a second or two on some
// filesystems), so a change in the same tick as the one a stamp shows
// would leave it equal. A stamp is therefore trusted only when it was
// already settleTime old when the listing began (settleCoarse for a
// filesystem that stamps whole seconds): any later change then gets a
// later time. Processes sharing a directory share the machine's clock
// (docs/consistency.md); on a platform whose stat does not give the
// change time, every look lists again.
const (
	settleTime   = 100 * time.Millisecond
	settleCoarse = 2 * time.Second
)

// maxHeld bounds the directories one listing's stamps hold open (a
// table of many daily partitions); the others are stamped by path,
// which costs a walk of the path at each look.
const maxHeld = 64

// dirStamp is what a stat of one directory said: its inode and its change
// time. The directory is held open (up to maxHeld), so that a later look
// stats it without walking its path (a third of the cost on the machine
// of BENCHMARKS.md); a directory removed or renamed since shows it, as
// its change time moves and a removed one has no links. A directory that
// did not exist is stamped by its nearest existing ancestor, whose change
// time moves when the first missing directory on the way is made.
type dirStamp struct {
	// at is the directory stamped: the one asked for, or its nearest
	// existing ancestor.
	at    string
	f     *os.File // at, held open; nil: stamped by path
	ino   uint64
	ctime int64 // nanoseconds since the epoch
}

// dirStamps are the stamps of the directories a listing read, each taken
// before the directory was read.
type dirStamps struct {
	// at is when the listing began, by the real clock: the filesystem's
	// times are the machine's, whatever clock the outbox was given.
	at     time.Time
	stamps []dirStamp
	held   int
	// trusted is false once a stamp could not be taken or had not settled
	// when the listing began: the next look lists again.
	trusted bool
}

// newDirStamps starts the stamps of a listing beginning now.
func newDirStamps() *dirStamps {
	return &dirStamps{at: time.Now(), trusted: true}
}

// add stamps dir before the listing reads it.
func (s *dirStamps) add(dir string) {
	if s == nil {
		return
	}
	st, ok := stampDir(dir, s.held < maxHeld)
	if !ok {
		s.trusted = false
		return
	}
	if st.f != nil {
		s.held++
	}
	if !settled(st.ctime, s.at) {
		s.trusted = false
	}
	s.stamps = append(s.stamps, st)
}

// merge adds the stamps of o, taken for the same listing, and takes
// over their handles.
func (s *dirStamps) merge(o *dirStamps) {
	s.stamps = append(s.stamps, o.stamps...)
	s.held += o.held
	s.trusted = s.trusted && o.trusted
	o.stamps, o.held = nil, 0
}

// settled reports whether a change time is far enough before at that a
// change after at cannot carry the same time.
func settled(ctime int64, at time.Time) bool {
	wait := settleTime
	if ctime%int64(time.Second) == 0 {
		wait = settleCoarse
	}
	return time.Unix(0, ctime).Add(wait).Before(at)
}

// unchanged reports whether every directory still shows its stamp, so
// that what the listing read still stands. Nil stamps (no listing yet, or
// a store without directories) are never unchanged.
func (s *dirStamps) unchanged() bool {
	if s == nil || !s.trusted {
		return false
	}
	for _, old := range s.stamps {
		var fi os.FileInfo
		var err error
		if old.f != nil {
			fi, err = old.f.Stat()
		} else {
			fi, err = os.Stat(old.at)
		}
		if err != nil {
			return false
		}
		ino, ctime, links, ok := changeTime(fi)
		if !ok || links == 0 || ino != old.ino || ctime != old.ctime {
			return false
		}
	}
	return true
}

// close releases the directories' handles: a stamp of a held directory
// is then never unchanged. It may run while another goroutine checks the
// stamps, which then fail on the closed handle and list.
func (s *dirStamps) close() {
	if s == nil {
		return
	}
	for _, st := range s.stamps {
		if st.f != nil {
			st.f.Close()
		}
	}
}

// stampDir stats dir, or its nearest existing ancestor when it does not
// exist, holding it open when hold is set. ok is false when that failed,
// or the platform gives no change time.
func stampDir(dir string, hold bool) (dirStamp, bool) {
	at := dir
	f, err := os.Open(at)
	for errors.Is(err, os.ErrNotExist) {
		up := filepath.Dir(at)
		if up == at {
			return dirStamp{}, false
		}
		at = up
		f, err = os.Open(at)
	}
	if err != nil {
		return dirStamp{}, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		f.Close()
		return dirStamp{}, false
	}
	ino, ctime, _, ok := changeTime(fi)
	if !ok {
		f.Close()
		return dirStamp{}, false
	}
	if !hold {
		f.Close()
		f = nil
	}
	return dirStamp{at: at, f: f, ino: ino, ctime: ctime}, true
}
