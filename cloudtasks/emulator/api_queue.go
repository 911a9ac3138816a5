package emulator

import (
	"container/heap"
	"encoding/binary"
	"math"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/google/btree"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The queue settings the service picks when a field is left unspecified.
const (
	DefaultMaxDispatchesPerSecond  = 500
	DefaultMaxConcurrentDispatches = 1000
	DefaultMaxBurstSize            = 100
	DefaultMaxAttempts             = 100
	DefaultMinBackoff              = 100 * time.Millisecond
	DefaultMaxBackoff              = time.Hour
	DefaultMaxDoublings            = 16
)

func (q QueueConfig) rateLimits() *cloudtaskspb.RateLimits {
	return &cloudtaskspb.RateLimits{
		MaxDispatchesPerSecond:  q.MaxDispatchesPerSecond,
		MaxConcurrentDispatches: q.MaxConcurrentDispatches,
	}
}

func (q QueueConfig) retryConfig() *cloudtaskspb.RetryConfig {
	rc := &cloudtaskspb.RetryConfig{MaxAttempts: q.MaxAttempts, MaxDoublings: q.MaxDoublings}
	if q.MaxRetryDuration != 0 {
		rc.MaxRetryDuration = durationpb.New(q.MaxRetryDuration)
	}
	if q.MinBackoff != 0 {
		rc.MinBackoff = durationpb.New(q.MinBackoff)
	}
	if q.MaxBackoff != 0 {
		rc.MaxBackoff = durationpb.New(q.MaxBackoff)
	}
	return rc
}

func (q QueueConfig) proto() *cloudtaskspb.Queue {
	pb := &cloudtaskspb.Queue{Name: q.Name, RateLimits: q.rateLimits(), RetryConfig: q.retryConfig()}
	if q.Paused {
		pb.State = cloudtaskspb.Queue_PAUSED
	}
	return pb
}

// fillQueueDefaults replaces unspecified rate limits and retry settings by
// the service's defaults and computes the output-only burst size.
func fillQueueDefaults(pb *cloudtaskspb.Queue) {
	if pb.RateLimits == nil {
		pb.RateLimits = &cloudtaskspb.RateLimits{}
	}
	rl := pb.RateLimits
	if rl.MaxDispatchesPerSecond == 0 {
		rl.MaxDispatchesPerSecond = DefaultMaxDispatchesPerSecond
	}
	if rl.MaxConcurrentDispatches == 0 {
		rl.MaxConcurrentDispatches = DefaultMaxConcurrentDispatches
	}
	rl.MaxBurstSize = burstSize(rl.MaxDispatchesPerSecond)
	if pb.RetryConfig == nil {
		pb.RetryConfig = &cloudtaskspb.RetryConfig{}
	}
	rc := pb.RetryConfig
	if rc.MaxAttempts == 0 {
		rc.MaxAttempts = DefaultMaxAttempts
	}
	if rc.MinBackoff == nil {
		rc.MinBackoff = durationpb.New(DefaultMinBackoff)
	}
	if rc.MaxBackoff == nil {
		rc.MaxBackoff = durationpb.New(DefaultMaxBackoff)
	}
	if rc.MaxDoublings == 0 {
		rc.MaxDoublings = DefaultMaxDoublings
	}
	if rc.MaxRetryDuration == nil {
		rc.MaxRetryDuration = durationpb.New(0)
	}
	if pb.State == cloudtaskspb.Queue_STATE_UNSPECIFIED {
		pb.State = cloudtaskspb.Queue_RUNNING
	}
}

// burstSize is the output-only max_burst_size the emulator picks for a
// rate. The service documents only that it derives the burst from the rate;
// a queue with the default 500 dispatches/s shows 100, so the emulator
// gives one second's worth of tokens, at least 1 and at most
// DefaultMaxBurstSize.
func burstSize(rate float64) int32 {
	return int32(min(DefaultMaxBurstSize, max(1, math.Ceil(rate))))
}

// retryPolicy is a RetryConfig in plain Go values.
type retryPolicy struct {
	maxAttempts            int32
	maxRetryDuration       time.Duration
	minBackoff, maxBackoff time.Duration
	maxDoublings           int32
}

// effectiveRetry merges a task's own retry settings over its queue's.
func effectiveRetry(queue, task *cloudtaskspb.RetryConfig) retryPolicy {
	p := retryPolicy{
		maxAttempts:      queue.GetMaxAttempts(),
		maxRetryDuration: queue.GetMaxRetryDuration().AsDuration(),
		minBackoff:       queue.GetMinBackoff().AsDuration(),
		maxBackoff:       queue.GetMaxBackoff().AsDuration(),
		maxDoublings:     queue.GetMaxDoublings(),
	}
	if task == nil {
		return p
	}
	if task.MaxAttempts != 0 {
		p.maxAttempts = task.MaxAttempts
	}
	if task.MaxRetryDuration != nil {
		p.maxRetryDuration = task.MaxRetryDuration.AsDuration()
	}
	if task.MinBackoff != nil {
		p.minBackoff = task.MinBackoff.AsDuration()
	}
	if task.MaxBackoff != nil {
		p.maxBackoff = task.MaxBackoff.AsDuration()
	}
	if task.MaxDoublings != 0 {
		p.maxDoublings = task.MaxDoublings
	}
	return p
}

// backoff is the delay before retry number n (0 for the first retry): it
// starts at min_backoff, doubles max_doublings times, then grows by the
// last doubled interval each time, and never exceeds max_backoff.
func (p retryPolicy) backoff(n int32) time.Duration {
	d := p.minBackoff
	if n <= p.maxDoublings {
		for range n {
			d *= 2
			if d >= p.maxBackoff {
				return p.maxBackoff
			}
		}
	} else {
		for range p.maxDoublings {
			d *= 2
			if d >= p.maxBackoff {
				return p.maxBackoff
			}
		}
		step := d
		d += step * time.Duration(n-p.maxDoublings)
	}
	return min(d, p.maxBackoff)
}

// exhausted reports whether a task that has been attempted attempts times,
// first at first and created at created, gets no further attempt: both
// max_attempts and max_retry_duration must be satisfied (an unlimited one
// defers to the other), and no task outlives the 31-day retention.
func (p retryPolicy) exhausted(attempts int32, first, created, now time.Time) bool {
	if now.Sub(created) >= maxTaskRetention {
		return true
	}
	if p.maxAttempts < 0 && p.maxRetryDuration <= 0 {
		return false
	}
	attemptsDone := p.maxAttempts < 0 || attempts >= p.maxAttempts
	durationDone := p.maxRetryDuration <= 0 || now.Sub(first) >= p.maxRetryDuration
	return attemptsDone && durationDone
}

// queue is the emulator's state for one queue.
type queue struct {
	pb         *cloudtaskspb.Queue
	id         string
	tasks      map[string]*task       // by full task name
	byName     *btree.BTreeG[nameKey] // the names of tasks in order, for ListTasks
	taskPrefix string                 // "<queue name>/tasks/", how every task name in q starts
	pending    taskHeap               // tasks waiting for their time, not in flight
	// Token bucket for max_dispatches_per_second.
	tokens   float64
	refilled time.Time
	running  int32 // attempts in flight
	urls     map[string]string
	oidc     map[[2]string]*cloudtaskspb.HttpRequest_OidcToken
	policy   *iampb.Policy // nil until SetIamPolicy
}

func newQueue(pb *cloudtaskspb.Queue, id string, now time.Time) *queue {
	return &queue{
		pb:         pb,
		id:         id,
		tasks:      make(map[string]*task),
		byName:     btree.NewG(nameIndexDegree, nameKeyLess),
		taskPrefix: pb.Name + "/tasks/",
		tokens:     float64(pb.RateLimits.MaxBurstSize),
		refilled:   now,
		urls:       make(map[string]string),
		oidc:       make(map[[2]string]*cloudtaskspb.HttpRequest_OidcToken),
	}
}

// nameIndexDegree is the degree of a queue's name index: nodes of up to
// 63 names keep the tree shallow without making inserts move much.
const nameIndexDegree = 32

// nameKey is a task's place in its queue's name index. Every name in a
// queue starts with the same "<queue>/tasks/", so head holds the next 8
// bytes of the name (big-endian, zero-padded; task IDs hold no zero
// bytes): most comparisons end there, without reading the name from
// memory, which is most of an insert's cost in a large queue.
type nameKey struct {
	head uint64
	name string
}

func nameKeyLess(a, b nameKey) bool {
	if a.head != b.head {
		return a.head < b.head
	}
	return a.name < b.name
}

// key returns the index key of a name in q (one with q's task prefix).
func (q *queue) key(name string) nameKey {
	var b [8]byte
	copy(b[:], name[len(q.taskPrefix):])
	return nameKey{head: binary.BigEndian.Uint64(b[:]), name: name}
}

// add stores t under its name.
func (q *queue) add(t *task) {
	q.tasks[t.pb.Name] = t
	q.byName.ReplaceOrInsert(q.key(t.pb.Name))
}

// remove forgets t's name.
func (q *queue) remove(t *task) {
	delete(q.tasks, t.pb.Name)
	q.byName.Delete(q.key(t.pb.Name))
}

// ascendAfter calls fn on the queue's tasks in name order, starting with
// the first name after after, until fn returns false. The name after need
// not exist any more: a page token stays valid when its task is deleted.
func (q *queue) ascendAfter(after string, fn func(*task) bool) {
	if !strings.HasPrefix(after, q.taskPrefix) {
		if after > q.taskPrefix {
			return // after every name of q
		}
		after = q.taskPrefix
	}
	q.byName.AscendGreaterOrEqual(q.key(after), func(k nameKey) bool {
		return k.name == after || fn(q.tasks[k.name])
	})
}

// intern keeps one copy of each target URL per queue: most tasks of a
// queue share a handful of URLs, and a million copies would dominate the
// memory of a large backlog.
func (q *queue) intern(s string) string {
	if v, ok := q.urls[s]; ok {
		return v
	}
	if len(q.urls) < 1024 {
		q.urls[s] = s
	}
	return s
}

// compactHeaders stores a task's headers as key, value pairs: a map costs
// several hundred bytes even for two headers. Names and common values are
// interned.
func (q *queue) compactHeaders(h map[string]string) []string {
	if len(h) == 0 {
		return nil
	}
	out := make([]string, 0, 2*len(h))
	for k, v := range h {
		out = append(out, q.intern(k), q.intern(v))
	}
	return out
}

// internOIDC shares one token setting between the tasks that use the same
// service account and audience; stored tasks never modify it.
func (q *queue) internOIDC(a *cloudtaskspb.HttpRequest_OidcToken) *cloudtaskspb.HttpRequest_OidcToken {
	k := [2]string{a.OidcToken.GetServiceAccountEmail(), a.OidcToken.GetAudience()}
	if v, ok := q.oidc[k]; ok {
		return v
	}
	if len(q.oidc) < 64 {
		q.oidc[k] = a
	}
	return a
}

func (q *queue) refill(now time.Time) {
	rl := q.pb.RateLimits
	if el := now.Sub(q.refilled); el > 0 {
		q.tokens = math.Min(float64(rl.MaxBurstSize), q.tokens+el.Seconds()*rl.MaxDispatchesPerSecond)
	}
	q.refilled = now
}

// task is one stored task. Its proto keeps only what the caller sent;
// times live here as Unix nanoseconds so a large backlog stays small.
type task struct {
	pb       *cloudtaskspb.Task
	q        *queue
	schedule int64 // schedule_time
	created  int64 // create_time
	seq      uint64
	index    int32 // position in q.pending, -1 when not there
	running  int32 // attempts in flight; RunTask may start one beside another
	removed  bool
	headers  []string // the task's HTTP headers as key, value pairs
	// Attempt history that the worker sees in headers.
	executions   int32
	prevResponse int32
	retryReason  string
}

type taskHeap []*task

func (h taskHeap) Len() int { return len(h) }
func (h taskHeap) Less(i, j int) bool {
	if h[i].schedule != h[j].schedule {
		return h[i].schedule < h[j].schedule
	}
	return h[i].seq < h[j].seq
}
func (h taskHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = int32(i), int32(j)
}
func (h *taskHeap) Push(x any) {
	t := x.(*task)
	t.index = int32(len(*h))
	*h = append(*h, t)
}
func (h *taskHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.index = -1
	*h = old[:n-1]
	return t
}

func (q *queue) push(t *task) { heap.Push(&q.pending, t) }

func (q *queue) unschedule(t *task) {
	if t.index >= 0 {
		heap.Remove(&q.pending, int(t.index))
	}
}

// headerMap rebuilds the task's headers for a response.
func (t *task) headerMap() map[string]string {
	if len(t.headers) == 0 {
		return nil
	}
	m := make(map[string]string, len(t.headers)/2)
	for i := 0; i+1 < len(t.headers); i += 2 {
		m[t.headers[i]] = t.headers[i+1]
	}
	return m
}

// queueFilter is a parsed ListQueues filter: the queues in one state, or
// every queue.
type queueFilter struct {
	state cloudtaskspb.Queue_State
}

func (f queueFilter) matches(q *cloudtaskspb.Queue) bool {
	return f.state == cloudtaskspb.Queue_STATE_UNSPECIFIED || q.State == f.state
}

// queueFilterRE matches the filters the emulator understands, in the
// logging filter syntax the API documents ("state: PAUSED", "state=RUNNING").
var queueFilterRE = regexp.MustCompile(`^\s*state\s*(?::|=)\s*([A-Za-z_]+)\s*$`)

// parseQueueFilter reads a ListQueues filter. Only the state field is
// emulated; anything else is refused so that a test never silently gets
// an unfiltered list.
func parseQueueFilter(s string) (queueFilter, error) {
	if strings.TrimSpace(s) == "" {
		return queueFilter{}, nil
	}
	m := queueFilterRE.FindStringSubmatch(s)
	if m != nil {
		switch st := cloudtaskspb.Queue_State(cloudtaskspb.Queue_State_value[strings.ToUpper(m[1])]); st {
		case cloudtaskspb.Queue_RUNNING, cloudtaskspb.Queue_PAUSED, cloudtaskspb.Queue_DISABLED:
			return queueFilter{state: st}, nil
		}
	}
	return queueFilter{}, invalid("filter %q is not supported by the emulator; supported: state: RUNNING, state: PAUSED or state: DISABLED", s)
}
