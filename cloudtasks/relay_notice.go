package cloudtasks

import (
	"context"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// outcomeNoticeGap spaces one relay's outcome notifications: the outcomes
// recorded meanwhile share the next one, so that a busy relay sends at
// most one per gap, and a waiter in another process learns of an outcome
// within about one gap and one round trip.
const outcomeNoticeGap = 5 * time.Millisecond

// listen runs Config.Listener on the outbox's channel until ctx ends.
func (r *relay) listen(ctx context.Context) {
	err := r.d.cfg.Listener.Listen(ctx, r.notices.NoticeChannel(), r.heard)
	if ctx.Err() == nil {
		r.d.log.WarnContext(ctx, "the listener stopped; the relay and WaitOutcome poll every RelayInterval", "err", err)
	}
}

// heard acts on one notification: intents wake the loop, outcomes the
// waiters, and "" (the listener listens again, and may have missed
// anything) both.
func (r *relay) heard(payload string) {
	switch payload {
	case outbox.NoticeIntents:
		r.nudge()
		r.lookAgainLater()
	case outbox.NoticeOutcomes:
		r.recorded()
	case "":
		r.nudge()
		r.recorded()
	}
}

// lookAgainLater has the loop pass again one notice gap after the last
// notification of intents: the transactions that committed within the
// gap of a notifying one sent none of their own (outbox.Notices).
func (r *relay) lookAgainLater() {
	gap := r.notices.NoticeGap()
	if gap <= 0 || r.done == nil { // no loop to nudge
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.trail == nil {
		r.trail = r.d.clock.AfterFunc(gap, r.nudge)
		return
	}
	r.trail.Reset(gap)
}

// announcer sends the outbox's outcome notification when r.announce asks
// for one, at most once per outcomeNoticeGap, until ctx ends; one asked
// for and not sent by then is sent on the way out.
func (r *relay) announcer(ctx context.Context) {
	d := r.d
	send := func(ctx context.Context) {
		if err := r.notices.NotifyOutcomes(ctx); err != nil && ctx.Err() == nil {
			d.log.DebugContext(ctx, "relay: outcome notification not sent; waiters elsewhere read at their interval", "err", err)
		}
	}
	for {
		select {
		case <-r.announce:
		case <-ctx.Done():
			select {
			case <-r.announce:
				last, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				send(last)
				cancel()
			default:
			}
			return
		}
		send(ctx)
		select {
		case <-d.clock.After(outcomeNoticeGap):
		case <-ctx.Done():
		}
	}
}
