package cloudtasks

import (
	"context"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// announce publishes this process's default queue through an outbox
// whose processes can write an ID's first record blind of each other
// (outbox.Announcer), and warns about every live process there whose
// default queue differs: a new ID both dispatch at once, with no
// Task.Queue, can then become a task in each queue (docs/consistency.md).
// Neither step stops the dispatcher: a failure is logged.
func (d *Dispatcher) announce(ctx context.Context) {
	a, ok := d.box.(outbox.Announcer)
	if !ok {
		return
	}
	me := outbox.Process{ProcessorUUID: d.processor}
	if d.cfg.Queue != "" {
		me.DefaultQueue = d.cfg.queuePath(d.cfg.Queue)
	}
	if err := a.Announce(ctx, me); err != nil {
		d.log.WarnContext(ctx, "outbox: could not announce this process's default queue to the others sharing the outbox", "processor", d.processor, "err", err)
	}
	live, err := a.Announced(ctx)
	if err != nil {
		d.log.WarnContext(ctx, "outbox: could not read the default queues of the other processes sharing the outbox", "err", err)
		return
	}
	for _, p := range live {
		if p.ProcessorUUID == me.ProcessorUUID || p.DefaultQueue == "" || me.DefaultQueue == "" || p.DefaultQueue == me.DefaultQueue {
			continue
		}
		d.log.WarnContext(ctx, "another live process on this outbox has another default queue: an ID both dispatch at once without Task.Queue can become a task in each queue; change Config.Queue only once every process using the old one has stopped (docs/consistency.md)",
			"processor", d.processor, "default_queue", me.DefaultQueue,
			"other_processor", p.ProcessorUUID, "other_default_queue", p.DefaultQueue)
	}
}
