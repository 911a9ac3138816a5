package timers_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/timers"
)

// A retry timer for attempt 2 of a task, due in ten minutes.
func ExampleScheduler_ScheduleTimer() {
	ctx := context.Background()
	emu, err := emulator.New(emulator.Config{
		DisableDelivery: true,
		Queues:          []emulator.QueueConfig{{Name: "projects/my-project/locations/europe-west1/queues/timers"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	d, err := cloudtasks.NewDispatcher(ctx, &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "timers", EmulatorAddr: emu.Addr(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close(context.Background())

	due := time.Now().Add(10 * time.Minute)
	res, err := timers.New(d).ScheduleTimer(ctx, timers.TimerRequest{
		Kind: naming.KindRetry, RunID: "run1", TaskKey: "extract", Identity: naming.Identity{Number: 2}, At: due,
		Task: cloudtasks.Task{URL: "https://worker.example/extract"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.TimerID == fmt.Sprintf("timer:retry:run1:extract:2:%d", due.Unix()))
	fmt.Println(res.CloudTaskID[:2], res.Outcome, res.Due.Equal(due.Truncate(time.Second)))
	// Output:
	// true
	// t_ created true
}
