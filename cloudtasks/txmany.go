package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// MaxDispatchManyTx bounds the requests of one DispatchManyTx call. Its
// records and requests travel in one statement, which the database holds
// in memory whole; more requests go in further calls, in the same
// transaction if need be.
const MaxDispatchManyTx = 1000

// DispatchManyTx is DispatchTx for many requests at once: it records each
// of reqs inside the caller's database transaction tx, for a relay to
// create once tx commits, and returns their results in the order of
// reqs. Each answer is the one DispatchTx would give the request (queued,
// or already_existed and Skipped for an ID recorded as created or
// already_existed with the same payload), but the whole batch costs a
// constant number of statements: with an outbox that implements
// outbox.BulkIntents (outbox/pgbox, outbox.Memory), one that reads the
// latest records of all the IDs and one that writes every pending record
// and intent (none when every request is answered already_existed) and
// notifies listening relays as DispatchTx's statement does, once for the
// batch. With an outbox that implements only
// outbox.Intents it reads and writes each ID in turn, with the same
// answers. An empty reqs does nothing and returns nil, nil.
//
// All or nothing, in this order:
//
//   - Every request is checked as DispatchTx checks it (its ID, its task,
//     its queue, its size) before any statement: a bad one is a
//     *RequestError whose Field names its index (reqs[3].Task.URL), and
//     nothing is written. So is a batch that names one internal ID twice
//     (the Field names the second, the Rule the first): dispatch a repeat
//     in a call of its own. More than MaxDispatchManyTx requests are one
//     too.
//   - Then every recorded ID is answered, in the order of reqs, before
//     anything is written: the first request that DispatchTx would refuse
//     (a *ConflictError for another payload, an *OwnershipError, a
//     *NameHeldError, each naming the ID, or a *RequestError naming the
//     index, for another queue than the recorded one) is the call's
//     error, and nothing is written.
//   - Then the pending records and intents are written. One whose version
//     a concurrent transaction took first (it committed after the read)
//     is answered again from the winner, as DispatchTx does, at most
//     three times, each time with a statement that reads the winners (on
//     pgbox, within the refused write's own call) and one that writes
//     again. Only then can an error (the winner's other payload, say)
//     come after part of the batch is written in tx, as with any error
//     from the database: roll tx back.
//
// Errors are DispatchTx's, with an *OutboxError whose ID names the
// batch's first ID and how many others when a statement for the whole
// batch fails.
func (d *Dispatcher) DispatchManyTx(ctx context.Context, tx outbox.Tx, reqs []DispatchRequest) ([]DispatchResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if d.intents == nil {
		return nil, &ConfigError{Field: fieldOutbox, Value: fmt.Sprintf("%T", d.box),
			Rule: "records nothing inside a transaction; DispatchManyTx needs an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)"}
	}
	if tx == nil {
		return nil, &RequestError{Field: "tx", Value: "nil", Rule: "is required: the transaction to record the dispatches in"}
	}
	if len(reqs) > MaxDispatchManyTx {
		return nil, &RequestError{Field: "reqs", Value: fmt.Sprintf("%d requests", len(reqs)),
			Rule: fmt.Sprintf("exceed MaxDispatchManyTx (%d): split them over several calls, in the same transaction if need be", MaxDispatchManyTx)}
	}
	if d.flights.isClosed() {
		return nil, ErrClosed
	}
	start := d.clock.Now()
	b, err := d.newTxBatch(reqs, start)
	if err != nil {
		return nil, err
	}
	if err := b.startAll(ctx, d, start); err != nil {
		b.endAll(err)
		return nil, err
	}
	err = d.recordIntents(ctx, tx, b, start)
	b.endAll(err)
	if err != nil {
		return nil, err
	}
	out := make([]DispatchResult, len(b.items))
	for i := range b.items {
		out[i] = b.items[i].res
	}
	return out, nil
}

// txBatch is a DispatchManyTx call's requests on their way to the outbox.
type txBatch struct {
	items []txItem
}

// txItem is one request of a txBatch.
type txItem struct {
	id        naming.ID
	key       string
	task      *Task
	queuePath string
	fp        string
	// ctx holds the request's producer span, span itself (nil when no
	// span records).
	ctx  context.Context
	span trace.Span
	// req is the CreateTask request in the task's queue, traced and
	// checked for size.
	req *cloudtaskspb.CreateTaskRequest
	res DispatchResult
}

// newTxBatch checks every request as DispatchTx does before its spans
// start and its statements run: its ID, its task and its queue, and that
// no ID comes twice. Errors name the request's index.
func (d *Dispatcher) newTxBatch(reqs []DispatchRequest, now time.Time) (*txBatch, error) {
	b := &txBatch{items: make([]txItem, len(reqs))}
	first := make(map[string]int, len(reqs))
	for i := range reqs {
		id, err := reqs[i].ID()
		if err != nil {
			return nil, atIndex(i, "", err)
		}
		t := &reqs[i].Task
		if err := t.validate(now); err != nil {
			return nil, atIndex(i, "Task.", err)
		}
		if t.Queue == "" && d.cfg.Queue == "" {
			return nil, &RequestError{Field: fmt.Sprintf("reqs[%d].Task.Queue", i), Rule: "is required: Config.Queue names no default queue"}
		}
		key := id.String()
		if j, ok := first[key]; ok {
			return nil, &RequestError{Field: fmt.Sprintf("reqs[%d]", i), Value: key,
				Rule: fmt.Sprintf("names the same internal ID as reqs[%d]; a batch dispatches each ID once (dispatch a repeat in a call of its own)", j)}
		}
		first[key] = i
		b.items[i] = txItem{id: id, key: key, task: t, queuePath: d.queueOf(t.Queue), fp: naming.PayloadFingerprint(t.Body)}
	}
	return b, nil
}

// atIndex returns err, a *RequestError about the request at index i, with
// its Field naming the index (and prefix, the struct the field is in).
// Other errors are returned as they are.
func atIndex(i int, prefix string, err error) error {
	var re *RequestError
	if !errors.As(err, &re) {
		return err
	}
	field := re.Field
	if !strings.HasPrefix(field, prefix) {
		field = prefix + field
	}
	return &RequestError{Field: fmt.Sprintf("reqs[%d].%s", i, field), Value: re.Value, Rule: re.Rule, Err: re.Err}
}

// startAll starts each request's producer span and builds its CreateTask
// request with the span's trace context, checking its size.
func (b *txBatch) startAll(ctx context.Context, d *Dispatcher, now time.Time) error {
	for i := range b.items {
		it := &b.items[i]
		it.ctx, it.span = d.startSend(ctx, it.id, it.queuePath)
		it.req = it.task.createRequest(it.id, it.queuePath, now)
		if err := d.injectTrace(it.ctx, it.task, it.req); err != nil {
			return atIndex(i, "Task.", err)
		}
		if err := it.task.checkSize(it.req); err != nil {
			return atIndex(i, "Task.", err)
		}
	}
	return nil
}

// endAll ends the spans started, each with its request's answer, or with
// err, the call's.
func (b *txBatch) endAll(err error) {
	for i := range b.items {
		if it := &b.items[i]; it.span != nil {
			endSend(it.span, it.id, &it.res, err)
		}
	}
}

// recordIntents answers each request of b from its ID's latest record in
// tx, and records the pending records and intents of those due one: two
// statements for the batch. A request whose version another transaction
// took first is answered again from the winner, which the refusal
// carries, at most rereads times.
func (d *Dispatcher) recordIntents(ctx context.Context, tx outbox.Tx, b *txBatch, now time.Time) error {
	todo := make([]int, len(b.items))
	keys := make([]string, len(b.items))
	for i := range todo {
		todo[i], keys[i] = i, b.items[i].key
	}
	latest, err := d.bulk.LatestManyTx(ctx, tx, outbox.TableDispatch, keys)
	if err != nil {
		return &OutboxError{ID: batchSubject(keys), Op: OpRead, BeforeCall: true, Err: err}
	}
	for try := 0; ; try++ {
		var recs []outbox.Record
		var ins []outbox.Intent
		due := make(map[string]int)
		for _, i := range todo {
			rec, in, queued, err := d.answerTx(&b.items[i], latest, now)
			if err != nil {
				return atIndex(i, "", err)
			}
			if queued {
				recs, ins, due[rec.ID] = append(recs, rec), append(ins, in), i
			}
		}
		if len(recs) == 0 {
			return nil
		}
		refused, err := d.bulk.AppendIntents(ctx, tx, recs, ins)
		if err != nil {
			return &OutboxError{ID: batchSubject(keysOf(recs)), Op: OpRecordPending, BeforeCall: true, Err: err}
		}
		if len(refused) == 0 {
			return nil
		}
		todo, latest = todo[:0], make(map[string]outbox.Record, len(refused))
		for _, vc := range refused {
			if try == rereads {
				return &OutboxError{ID: vc.ID, Op: OpRecordPending, BeforeCall: true, Err: vc}
			}
			todo, latest[vc.ID] = append(todo, due[vc.ID]), vc.Current
		}
		now = d.clock.Now()
	}
}

// answerTx answers one request of a batch from latest, its ID's record
// (if any) as read in the transaction, as recordIntent does: it sets the
// item's result and, when queued, returns the pending record and intent
// to write.
func (d *Dispatcher) answerTx(it *txItem, latest map[string]outbox.Record, now time.Time) (outbox.Record, outbox.Intent, bool, error) {
	prev, found := latest[it.key]
	var p *outbox.Record
	if found {
		p = &prev
	}
	res, rec, in, done, err := d.pendingIntent(it.ctx, it.id, it.task, it.req, p, it.fp, now)
	it.res = res
	if done || err != nil {
		return outbox.Record{}, outbox.Intent{}, false, err
	}
	it.res.Outcome, it.res.FirstRecorded = OutcomeQueued, rec.CreatedAt
	return rec, in, true, nil
}

// pendingIntent answers a transactional dispatch of id whose latest
// record is prev (nil: none), as Dispatch would before its call, with
// req, the task's CreateTask request: done when res holds the answer
// (already_existed), err when the ID may not be dispatched now, and
// otherwise the pending record and intent to write (res then lacks only
// its outcome).
func (d *Dispatcher) pendingIntent(ctx context.Context, id naming.ID, t *Task, req *cloudtaskspb.CreateTaskRequest, prev *outbox.Record, fp string,
	now time.Time) (res DispatchResult, rec outbox.Record, in outbox.Intent, done bool, err error) {
	key := id.String()
	if prev != nil {
		if req, err = d.requestFor(ctx, id, t, req, prev, now); err != nil {
			return res, rec, in, false, err
		}
	}
	res = DispatchResult{ID: key, CloudTaskID: id.CloudTaskID(), TaskName: req.GetTask().GetName()}
	if prev != nil {
		if done, err = d.answerFromRecord(ctx, &res, prev, fp, now); done || err != nil {
			return res, rec, in, done, err
		}
	}
	rec = recordOf(id, req.GetParent())
	rec.TaskName, rec.Status, rec.PayloadSHA256 = res.TaskName, outbox.StatusPending, fp
	traceIDs(ctx, &rec)
	if prev != nil {
		rec.CreateCalls = prev.CreateCalls
	}
	rec.Follow(prev, now)
	body, err := proto.Marshal(req)
	if err != nil {
		return res, rec, in, false, fmt.Errorf("cloudtasks: encode the CreateTask request of %s: %w", key, err)
	}
	return res, rec, outbox.Intent{Table: rec.Table, ID: key, Version: rec.Version, Queue: rec.Queue, Request: body}, false, nil
}

// batchSubject names a batch's IDs in an error: the first, and how many
// more.
func batchSubject(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	return fmt.Sprintf("%s and %d more IDs", keys[0], len(keys)-1)
}

func keysOf(recs []outbox.Record) []string {
	keys := make([]string, len(recs))
	for i := range recs {
		keys[i] = recs[i].ID
	}
	return keys
}

// perIDIntents does outbox.BulkIntents's work with the per-ID methods of
// an outbox.Intents store that lacks it: one LatestTx and one
// AppendIntent per ID.
type perIDIntents struct{ outbox.Intents }

func (p perIDIntents) LatestManyTx(ctx context.Context, tx outbox.Tx, t outbox.Table, ids []string) (map[string]outbox.Record, error) {
	out := make(map[string]outbox.Record, len(ids))
	for _, id := range ids {
		r, ok, err := p.LatestTx(ctx, tx, t, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out[id] = r
		}
	}
	return out, nil
}

func (p perIDIntents) AppendIntents(ctx context.Context, tx outbox.Tx, rs []outbox.Record, ins []outbox.Intent) ([]*outbox.VersionConflictError, error) {
	if len(ins) != len(rs) {
		return nil, fmt.Errorf("cloudtasks: %d intents for %d records", len(ins), len(rs))
	}
	var refused []*outbox.VersionConflictError
	for i := range rs {
		err := p.AppendIntent(ctx, tx, rs[i], ins[i])
		var vc *outbox.VersionConflictError
		switch {
		case errors.As(err, &vc):
			refused = append(refused, vc)
		case err != nil:
			return nil, err
		}
	}
	return refused, nil
}
