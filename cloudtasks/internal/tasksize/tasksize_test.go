package tasksize_test

import (
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tasksize"
)

// Time budget: well under a second (a few megabyte-sized allocations).

// withBody is an HTTP task whose body makes it exactly size bytes long.
func withBody(t *testing.T, size int) *cloudtaskspb.Task {
	t.Helper()
	task := &cloudtaskspb.Task{
		Name: "projects/p/locations/l/queues/q/tasks/t",
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: "https://example.com/x", Headers: map[string]string{"Content-Type": "application/json"},
		}},
	}
	// The body's length prefix grows with the body, so aim, then adjust.
	hr := task.GetHttpRequest()
	hr.Body = make([]byte, size-proto.Size(task))
	for n := proto.Size(task); n != size; n = proto.Size(task) {
		hr.Body = make([]byte, len(hr.Body)+size-n)
	}
	return task
}

func TestOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, tasksize.Of(nil))
	require.Equal(t, 0, tasksize.Of(&cloudtaskspb.Task{}))
	// Field 1 (name): tag byte, length byte, 3 bytes.
	require.Equal(t, 5, tasksize.Of(&cloudtaskspb.Task{Name: "abc"}))
	task := withBody(t, 1234)
	require.Equal(t, 1234, tasksize.Of(task))
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		size int
		err  string
	}{
		{"small", 100, ""},
		{"exactly Max", tasksize.Max, ""},
		{"one byte over Max (10^6 + 1)", tasksize.Max + 1, "task is 1000001 bytes; at most 1000000 bytes (1 MB) are allowed"},
		{"2^20 bytes", 1 << 20, "task is 1048576 bytes; at most 1000000 bytes (1 MB) are allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			task := withBody(t, tt.size)
			require.Equal(t, tt.size, tasksize.Of(task))
			err := tasksize.Check(task)
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.err)
		})
	}
}
