package naming_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
)

// FuzzParse checks that Parse never panics, that whatever it accepts prints
// back to the same text, and that whatever it rejects is an ErrInvalidID.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"dispatch:run1:extract:1",
		"timer:retry:run1:extract:1:1705340400",
		"timer:heartbeat:run1:extract:1705340460",
		"dispatch:r:t:01", "dispatch::t:1", "timer:retry:r:t:1:-1", "dispatch:r:t:k-abc",
		"timer:heartbeat:r:t:1:2", "dispatch:r\x00:t:1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := naming.Parse(s)
		if err != nil {
			if !errors.Is(err, naming.ErrInvalidID) {
				t.Fatalf("Parse(%q) error %v does not match ErrInvalidID", s, err)
			}
			return
		}
		if got := id.String(); got != s {
			t.Fatalf("Parse(%q).String() = %q", s, got)
		}
		if rebuilt, ok, err := rebuild(id); ok && (err != nil || rebuilt != id) {
			t.Fatalf("Parse(%q) = %+v, which its constructor builds as %+v, %v", s, id, rebuilt, err)
		}
		if !naming.IsCloudTaskID(id.CloudTaskID()) {
			t.Fatalf("CloudTaskID of %q = %q", s, id.CloudTaskID())
		}
	})
}

// FuzzCloudTaskID checks that every valid ID, however its parts were chosen,
// gets a task ID of the form ^[dt]_[a-z2-7]{26}$ with the prefix of its kind.
func FuzzCloudTaskID(f *testing.F) {
	f.Add(uint8(1), "run1", "extract", "", int64(0))
	f.Add(uint8(2), "run1", "extract", "evt-42", int64(1705340400))
	f.Add(uint8(3), "run1", "extract", "", int64(1705340460))
	f.Fuzz(func(t *testing.T, kind uint8, run, task, key string, epoch int64) {
		// A key makes a caller-key identity, no key an attempt number.
		identity := naming.Attempt(uint64(epoch))
		if key != "" {
			identity = naming.CallerKey(key)
		}
		var id naming.ID
		var err error
		switch kind % 3 {
		case 0:
			id, err = naming.NewDispatch(run, task, identity)
		case 1:
			id, err = naming.NewRetryTimer(run, task, identity, time.Unix(epoch, 0))
		default:
			id, err = naming.NewHeartbeat(run, task, time.Unix(epoch, 0))
		}
		if err != nil {
			if !errors.Is(err, naming.ErrInvalidID) {
				t.Fatalf("constructor error %v does not match ErrInvalidID", err)
			}
			return
		}
		ct := id.CloudTaskID()
		if !naming.IsCloudTaskID(ct) {
			t.Fatalf("CloudTaskID(%q) = %q", id, ct)
		}
		if wantPrefix := map[bool]string{true: "t_", false: "d_"}[id.IsTimer()]; ct[:2] != wantPrefix {
			t.Fatalf("CloudTaskID(%q) = %q, want prefix %s", id, ct, wantPrefix)
		}
		back, err := naming.Parse(id.String())
		if err != nil || back != id {
			t.Fatalf("built ID %q does not parse back: %v, %+v", id, err, back)
		}
	})
}

// rebuild makes id again from its parts through the public constructor of
// its kind. ok is false when the constructors cannot say its attempt slot:
// only a number can be said again (a caller key is hashed, a unique token
// is fresh).
func rebuild(id naming.ID) (rebuilt naming.ID, ok bool, err error) {
	n, numErr := strconv.ParseUint(id.Attempt(), 10, 64)
	numbered := numErr == nil && strconv.FormatUint(n, 10) == id.Attempt()
	switch id.Kind() {
	case naming.KindDispatch:
		if !numbered {
			return naming.ID{}, false, nil
		}
		rebuilt, err = naming.NewDispatch(id.RunID(), id.TaskKey(), naming.Attempt(n))
	case naming.KindRetry:
		if !numbered {
			return naming.ID{}, false, nil
		}
		rebuilt, err = naming.NewRetryTimer(id.RunID(), id.TaskKey(), naming.Attempt(n), id.Time())
	default:
		rebuilt, err = naming.NewHeartbeat(id.RunID(), id.TaskKey(), id.Time())
	}
	return rebuilt, true, err
}
