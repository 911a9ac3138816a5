package cloudtasks_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
)

// Dispatching the same attempt twice makes one task: the second call is
// answered as a duplicate.
func ExampleDispatcher_Dispatch() {
	ctx := context.Background()
	emu, err := emulator.New(emulator.Config{
		DisableDelivery: true,
		Queues:          []emulator.QueueConfig{{Name: "projects/my-project/locations/europe-west1/queues/work"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()

	d, err := cloudtasks.NewDispatcher(ctx, &cloudtasks.Config{
		Project: "my-project", Location: "europe-west1", Queue: "work",
		EmulatorAddr: emu.Addr(),
		// OutboxDir: "/var/lib/ctdispatch", to keep a durable record.
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close(context.Background())

	req := cloudtasks.DispatchRequest{
		RunID: "run1", TaskKey: "extract", Identity: naming.Identity{Number: 1},
		Task: cloudtasks.Task{URL: "https://worker.example/extract", Body: []byte(`{"table":"orders"}`)},
	}
	for range 2 {
		res, err := d.Dispatch(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.ID, res.CloudTaskID, res.Outcome)
	}
	fmt.Println("tasks in the queue:", emu.TaskCount())
	// Output:
	// dispatch:run1:extract:1 d_cxtoltqhbncw6nevn7hy53kqn6 created
	// dispatch:run1:extract:1 d_cxtoltqhbncw6nevn7hy53kqn6 already_existed
	// tasks in the queue: 1
}
