package naming_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
)

func ExampleNewDispatch() {
	id, err := naming.NewDispatch("run1", "extract", naming.AttemptNumber(1))
	if err != nil {
		panic(err)
	}
	fmt.Println(id)
	fmt.Println(id.CloudTaskID())
	// Output:
	// dispatch:run1:extract:1
	// d_cxtoltqhbncw6nevn7hy53kqn6
}

func ExampleNewRetryTimer() {
	due := time.Date(2024, 1, 15, 17, 40, 0, 0, time.UTC)
	id, err := naming.NewRetryTimer("run1", "extract", "1", due)
	if err != nil {
		panic(err)
	}
	fmt.Println(id)
	fmt.Println(id.CloudTaskID())
	// Output:
	// timer:retry:run1:extract:1:1705340400
	// t_hlljqq57362d4n3x2kett7jrqf
}

func ExampleParse() {
	id, err := naming.Parse("timer:heartbeat:run1:extract:1705340460")
	if err != nil {
		panic(err)
	}
	fmt.Println(id.Kind(), id.RunID(), id.TaskKey(), id.Time().Format(time.RFC3339))
	// Output:
	// heartbeat run1 extract 2024-01-15T17:41:00Z
}

func ExampleParse_invalid() {
	_, err := naming.Parse("dispatch:run1:extract:a:b")
	fmt.Println(errors.Is(err, naming.ErrInvalidID))
	var e *naming.Error
	if errors.As(err, &e) {
		fmt.Println(e.Component)
	}
	_, err = naming.NewDispatch("run1", "extract:v2", "1")
	fmt.Println(err)
	// Output:
	// true
	// internal ID
	// invalid internal ID: task_key "extract:v2" contains ':' (the separator); allowed: [A-Za-z0-9._-]
}

func ExampleIdentity() {
	byKey := naming.CallerKey("evt-42")
	attempt, err := byKey.Attempt("extract")
	if err != nil {
		panic(err)
	}
	id, _ := naming.NewDispatch("run1", "extract", attempt)
	fmt.Println(id)
	// Output:
	// dispatch:run1:extract:k-kdfo6u43zxiplof3rajyylplvs
}

func ExamplePayloadFingerprint() {
	a := naming.PayloadFingerprint([]byte(`{"b": 2, "a": 1}`))
	b := naming.PayloadFingerprint([]byte(`{"a":1,"b":2}`))
	fmt.Println(a == b)
	// Output:
	// true
}

// An identity must say which attempt a request is: the zero one is
// refused, so a forgotten attempt never becomes attempt 0.
func ExampleIdentity_zero() {
	for _, id := range []naming.Identity{naming.Attempt(2), naming.CallerKey("evt-42"), {}} {
		slot, err := id.Attempt("extract")
		fmt.Println(slot, err != nil)
	}
	// Output:
	// 2 false
	// k-kdfo6u43zxiplof3rajyylplvs false
	//  true
}
