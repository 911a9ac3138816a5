package cloudtasks_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// A dispatcher made on a Parquet directory where a live process has
// another default queue warns once, naming this process and its queue and
// the other process and its queue (a rolling redeploy that changes
// Config.Queue, docs/consistency.md). With the same queue, without a
// default queue, beside a process that announced nothing (one of an
// older version) or once the other has stopped, it says nothing.
func TestNewDispatcherWarnsOfALiveProcessWithAnotherDefaultQueue(t *testing.T) {
	t.Parallel()
	const otherQueue = "projects/proj/locations/europe-west1/queues/other"
	for _, tc := range []struct {
		name   string
		queue  string // the second process's Config.Queue
		first  string // what the first process is: "dispatcher", "closed", "silent" or "dead"
		warned bool
	}{
		{"another default queue", "other", "dispatcher", true},
		{"the same default queue", "default", "dispatcher", false},
		{"no default queue", "", "dispatcher", false},
		{"the other stopped", "other", "closed", false},
		{"the other announced nothing", "other", "silent", false},
		{"the other died and left its announcement", "other", "dead", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			var firstUUID string
			switch tc.first {
			case "dispatcher", "closed":
				a := w.open(t, nil)
				firstUUID = a.box.ProcessorUUID()
				if tc.first == "closed" {
					require.NoError(t, a.d.Close(t.Context()))
					require.NoError(t, a.box.Close())
				}
			case "silent":
				box, err := parquetbox.Open(t.Context(), parquetbox.Config{Root: w.root, ProcessorUUID: uuid.Must(uuid.NewV7()), Clock: w.clock})
				require.NoError(t, err)
				t.Cleanup(func() { box.Close() })
			case "dead":
				firstUUID = uuid.Must(uuid.NewV7()).String()
				wal := filepath.Join(w.root, "wal")
				require.NoError(t, os.MkdirAll(wal, 0o700))
				require.NoError(t, os.WriteFile(filepath.Join(wal, firstUUID+".json"),
					[]byte(`{"processor_uuid":"`+firstUUID+`","default_queue":"`+worldQueue+`"}`+"\n"), 0o600))
			}

			var logs syncBuffer
			b := w.open(t, func(c *cloudtasks.Config) {
				c.Queue = tc.queue
				c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			var warnings []map[string]any
			sc := bufio.NewScanner(strings.NewReader(logs.b.String())) // NewDispatcher has returned: nothing writes now
			for sc.Scan() {
				var line map[string]any
				require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
				if strings.Contains(line["msg"].(string), "default queue") {
					delete(line, "time")
					warnings = append(warnings, line)
				}
			}
			if !tc.warned {
				require.Empty(t, warnings)
				return
			}
			require.Len(t, warnings, 1)
			require.Equal(t, map[string]any{
				"level":               "WARN",
				"msg":                 warnings[0]["msg"],
				"processor":           b.box.ProcessorUUID(),
				"default_queue":       otherQueue,
				"other_processor":     firstUUID,
				"other_default_queue": worldQueue,
			}, warnings[0])
			require.Contains(t, warnings[0]["msg"], "docs/consistency.md")
		})
	}
}
