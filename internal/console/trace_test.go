package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTraceURL(t *testing.T) {
	t.Parallel()
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name, tmpl, project, traceID, queue, want string
	}{
		{"Cloud Trace by default, project of the queue", "", "", tid, "projects/proj-1/locations/l/queues/q",
			"https://console.cloud.google.com/traces/list?tid=" + tid + "&project=proj-1"},
		{"a configured project wins", "", "other", tid, "projects/proj-1/locations/l/queues/q",
			"https://console.cloud.google.com/traces/list?tid=" + tid + "&project=other"},
		{"a worker's queue ID names no project", "", "", tid, "q",
			"https://console.cloud.google.com/traces/list?tid=" + tid + "&project="},
		{"another backend", "http://jaeger.local:16686/trace/{trace_id}", "", tid, "q", "http://jaeger.local:16686/trace/" + tid},
		{"no trace, no link", "", "", "", "projects/p/locations/l/queues/q", ""},
		{"links off", TraceURLOff, "", tid, "projects/p/locations/l/queues/q", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Config{Outbox: "x", TraceURL: tc.tmpl, TraceProject: tc.project}.withDefaults()
			require.NoError(t, c.validate())
			require.Equal(t, tc.want, c.traceURL(tc.traceID, tc.queue))
		})
	}
}

func TestTraceURLRefused(t *testing.T) {
	t.Parallel()
	for tmpl, want := range map[string]string{
		"https://trace.example/": `console: TraceURL "https://trace.example/" is not a trace link template; allowed: an absolute http or https URL containing {trace_id} (and optionally {project}), or "off"`,
		"/trace/{trace_id}":      `console: TraceURL "/trace/{trace_id}" is not a trace link template; allowed: an absolute http or https URL containing {trace_id} (and optionally {project}), or "off"`,
	} {
		c := Config{Outbox: "x", TraceURL: tmpl}.withDefaults()
		require.EqualError(t, c.validate(), want)
	}
}
