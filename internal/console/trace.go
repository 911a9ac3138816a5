package console

import (
	"fmt"
	"net/url"
	"strings"
)

// DefaultTraceURL opens a trace in Cloud Trace: {trace_id} is the record's
// trace ID, {project} the project of its queue (or Config.TraceProject).
const DefaultTraceURL = "https://console.cloud.google.com/traces/list?tid={trace_id}&project={project}"

// The placeholders a trace URL template may hold.
const (
	traceIDPlaceholder = "{trace_id}"
	projectPlaceholder = "{project}"
)

// validTraceURL checks a trace URL template: an absolute http or https URL
// that names {trace_id}.
func validTraceURL(tmpl string) error {
	u, err := url.Parse(strings.NewReplacer(traceIDPlaceholder, "t", projectPlaceholder, "p").Replace(tmpl))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(tmpl, traceIDPlaceholder) {
		return fmt.Errorf("console: TraceURL %q is not a trace link template; allowed: an absolute http or https URL containing %s (and optionally %s), or \"off\"",
			tmpl, traceIDPlaceholder, projectPlaceholder)
	}
	return nil
}

// traceURL returns the link to the trace traceID of a record whose queue
// is queue (a full resource name, or a worker's queue ID), or "" when the
// record has no trace or links are off.
func (c *Config) traceURL(traceID, queue string) string {
	if traceID == "" || c.TraceURL == TraceURLOff {
		return ""
	}
	project := c.TraceProject
	if project == "" {
		if rest, ok := strings.CutPrefix(queue, "projects/"); ok {
			project, _, _ = strings.Cut(rest, "/")
		}
	}
	return strings.NewReplacer(traceIDPlaceholder, url.QueryEscape(traceID), projectPlaceholder, url.QueryEscape(project)).Replace(c.TraceURL)
}

// TraceURLOff as Config.TraceURL shows trace IDs without links.
const TraceURLOff = "off"
