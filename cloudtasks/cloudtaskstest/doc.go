// Package cloudtaskstest is a conformance suite for Cloud Tasks endpoints:
// it asserts, through the official Go client, the behaviours ctdispatch
// depends on (real status codes, anchored name validation, the service's
// limits, among them a task of exactly cloudtasks/internal/tasksize's Max accepted,
// names that stay taken after delete and purge, BASIC and FULL views,
// paging with page tokens bound to their request (another queue's token,
// a forged one and a switched filter are InvalidArgument; an expired one
// too, where the clock can be advanced), the Locations service, and
// BatchCreateTasks: its finished operation, per-request failures by index,
// batches refused whole, and faults).
//
// # Targets
//
// The same suite runs against the in-repo emulator (always, on a fake
// clock, so it also checks that names become free after the reuse window)
// and against real Cloud Tasks when credentials are available:
//
//	CTDISPATCH_CONFORMANCE_PROJECT=my-project \
//	CTDISPATCH_CONFORMANCE_LOCATION=europe-west1 \
//	go test ./cloudtasks/cloudtaskstest -run Conformance -v
//
// uses Application Default Credentials. Each subtest creates a paused
// queue named ctd-conformance-<random>, never delivers anything, and
// deletes the queue at the end (the service keeps deleted queue names for
// a few days; the random suffix avoids clashes).
//
// # Use in your own tests
//
// RunConformanceTests takes a function that returns a Target; point it at
// any endpoint that claims to speak Cloud Tasks. A target that can inject
// faults sets Target.InjectFault (the emulator's does, through SetFaults);
// without it the fault tests are skipped.
package cloudtaskstest
