package cloudtasks

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/outbox"
)

func TestOnRecord(t *testing.T) {
	t.Parallel()
	const me, other, fp = "p-me", "p-other", "fp1"
	rec := func(s outbox.Status, payload, by string) *outbox.Record {
		return &outbox.Record{Status: s, PayloadSHA256: payload, ProcessorUUID: by}
	}
	tests := []struct {
		name    string
		prev    *outbox.Record
		enforce bool
		want    repeat
	}{
		{"created, same payload", rec(outbox.StatusCreated, fp, other), false, repeatSkip},
		{"already_existed, same payload", rec(outbox.StatusAlreadyExisted, fp, me), false, repeatSkip},
		{"created, payload not recorded", rec(outbox.StatusCreated, "", me), false, repeatSkip},
		{"created, another payload", rec(outbox.StatusCreated, "fp2", me), false, repeatConflict},
		{"pending, another payload", rec(outbox.StatusPending, "fp2", me), false, repeatConflict},
		{"pending, own", rec(outbox.StatusPending, fp, me), true, repeatCall},
		{"pending, another's", rec(outbox.StatusPending, fp, other), false, repeatCall},
		{"pending, another's, ownership enforced", rec(outbox.StatusPending, fp, other), true, repeatNotOwner},
		{"failed, another payload", rec(outbox.StatusFailed, "fp2", me), false, repeatCall},
		{"not_found", rec(outbox.StatusNotFound, fp, other), true, repeatCall},
		{"cancelled, another payload", rec(outbox.StatusCancelled, "fp2", other), true, repeatCall},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, onRecord(tt.prev, fp, me, tt.enforce))
		})
	}
}

func TestRecovers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	stale := 5 * time.Minute
	tests := []struct {
		status outbox.Status
		age    time.Duration
		want   bool
	}{
		{outbox.StatusPending, stale, true},
		{outbox.StatusPending, stale - time.Second, false},
		{outbox.StatusFailed, time.Hour, false},
		{outbox.StatusCancelled, time.Hour, false},
	}
	for _, tt := range tests {
		prev := &outbox.Record{Status: tt.status, UpdatedAt: now.Add(-tt.age)}
		require.Equal(t, tt.want, recovers(prev, now, stale), "%s %s old", tt.status, tt.age)
	}
}

func TestDeletedByCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status outbox.Status
		code   string
		want   bool
	}{
		{outbox.StatusCancelled, "", true},
		{outbox.StatusCancelled, "AlreadyExists", true},
		{outbox.StatusCancelled, "NotFound", false},
		{outbox.StatusFailed, "", false},
		{outbox.StatusPending, "", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, deletedByCancel(&outbox.Record{Status: tt.status, ErrorCode: tt.code}), "%s %q", tt.status, tt.code)
	}
}

func TestOnCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error
		ended bool
		want  createVerdict
	}{
		{"ok", nil, false, createVerdict{outbox.StatusCreated, codes.OK}},
		{"already exists", status.Error(codes.AlreadyExists, "x"), false, createVerdict{outbox.StatusAlreadyExisted, codes.AlreadyExists}},
		{"already exists after the context ended", status.Error(codes.AlreadyExists, "x"), true, createVerdict{outbox.StatusAlreadyExisted, codes.AlreadyExists}},
		{"unavailable", status.Error(codes.Unavailable, "x"), false, createVerdict{"", codes.Unavailable}},
		{"deadline", context.DeadlineExceeded, false, createVerdict{"", codes.DeadlineExceeded}},
		{"permanent", status.Error(codes.InvalidArgument, "x"), false, createVerdict{outbox.StatusFailed, codes.InvalidArgument}},
		{"permanent after the context ended", status.Error(codes.PermissionDenied, "x"), true, createVerdict{"", codes.PermissionDenied}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, onCreate(tt.err, tt.ended))
		})
	}
}

func TestOnGet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err    error
		status outbox.Status
		ok     bool
	}{
		{nil, outbox.StatusAlreadyExisted, true},
		{status.Error(codes.NotFound, "x"), outbox.StatusNotFound, true},
		{status.Error(codes.Unavailable, "x"), "", false},
		{status.Error(codes.PermissionDenied, "x"), "", false},
	}
	for _, tt := range tests {
		s, ok := onGet(tt.err)
		require.Equal(t, tt.status, s, "%v", tt.err)
		require.Equal(t, tt.ok, ok, "%v", tt.err)
	}
}

func TestOnDelete(t *testing.T) {
	t.Parallel()
	notFound := status.Error(codes.NotFound, "x")
	created, cancelled := &outbox.Record{Status: outbox.StatusCreated}, &outbox.Record{Status: outbox.StatusCancelled}
	tests := []struct {
		name  string
		err   error
		known bool
		prev  *outbox.Record
		want  deleteVerdict
	}{
		{"deleted", nil, true, created, deleteVerdict{outcome: CancelDeleted, record: true}},
		{"deleted, unknown ID", nil, false, &outbox.Record{}, deleteVerdict{outcome: CancelDeleted, record: true}},
		{"gone, unknown ID", notFound, false, &outbox.Record{}, deleteVerdict{outcome: CancelUnknown}},
		{"gone, created", notFound, true, created, deleteVerdict{outcome: CancelAlreadyGone, record: true}},
		{"gone, cancelled already", notFound, true, cancelled, deleteVerdict{outcome: CancelAlreadyGone}},
		{"failed", status.Error(codes.Unavailable, "x"), true, created, deleteVerdict{failed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, onDelete(tt.err, tt.known, tt.prev))
		})
	}
}

func TestCancelQueue(t *testing.T) {
	t.Parallel()
	queueOf := func(q string) string {
		if q == "" {
			q = "default"
		}
		return "projects/p/locations/l/queues/" + q
	}
	recorded := &outbox.Record{Queue: "projects/p/locations/l/queues/work"}
	tests := []struct {
		name    string
		known   bool
		queue   string
		want    string
		wantErr string
	}{
		{"known, queue empty", true, "", recorded.Queue, ""},
		{"known, the recorded queue", true, "work", recorded.Queue, ""},
		{"known, another queue", true, "other", "",
			`Queue "other" differs from the queue the outbox recorded for k (projects/p/locations/l/queues/work); leave it empty or name that queue`},
		{"unknown, queue given", false, "other", "projects/p/locations/l/queues/other", ""},
		{"unknown, no queue", false, "", "",
			"Queue is required: the outbox has no record of k, so it cannot tell which queue holds the task"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := cancelQueue("k", recorded, tt.known, tt.queue, queueOf)
			if tt.wantErr != "" {
				var re *RequestError
				require.True(t, errors.As(err, &re))
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
