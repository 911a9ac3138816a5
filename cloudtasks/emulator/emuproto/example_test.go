package emuproto_test

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// A tool in another process reads a running emulator's inspection from
// its HTTP server (here one started in-process, for the example).
func ExampleInspection() {
	srv, err := emulator.New(emulator.Config{
		Queues: []emulator.QueueConfig{{Name: "projects/p/locations/l/queues/q"}},
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	resp, err := http.Get("http://" + srv.HTTPAddr() + emuproto.InspectPath)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var ins emuproto.Inspection
	if err := json.NewDecoder(resp.Body).Decode(&ins); err != nil {
		panic(err)
	}
	for _, q := range ins.Queues {
		fmt.Printf("%s: %d tasks, %d deliveries shown\n", q.Name, q.Tasks, len(ins.Deliveries))
	}
	// Output:
	// projects/p/locations/l/queues/q: 0 tasks, 0 deliveries shown
}
