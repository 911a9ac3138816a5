package chaos_test

import (
	"fmt"

	"github.com/ctdispatch/ctdispatch/internal/chaos"
)

// Each scenario reports one line; a run closes with the counts.
func ExampleResult_Line() {
	rep := chaos.Report{Passed: 1, Failed: 1, Results: []chaos.Result{
		{Scenario: chaos.ScenarioFaults, Passed: true, Tried: "dispatched 10 requests twice under faults", Held: "exactly 10 tasks"},
		{Scenario: chaos.ScenarioCrash, Tried: "killed a dispatcher 3 times", Held: "broke: 11 tasks in the queue, want 10"},
	}}
	for _, r := range rep.Results {
		fmt.Println(r.Line())
	}
	fmt.Println(rep.Summary())
	// Output:
	// PASS faults: dispatched 10 requests twice under faults; exactly 10 tasks
	// FAIL crash: killed a dispatcher 3 times; broke: 11 tasks in the queue, want 10
	// 1 passed, 1 failed
}
