package naming_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
)

func ExampleNewDispatch() {
	id, err := naming.NewDispatch("run1", "extract", naming.Attempt(1))
	if err != nil {
		panic(err)
	}
	fmt.Println(id)
	fmt.Println(id.CloudTaskID())
	// Output:
	// dispatch:run1:extract:1
	// d_cxtoltqhbncw6nevn7hy53kqn6
}

// Attempt 1 of extract failed; the retry timer starts attempt 2 at due, so
// it carries the identity attempt 2's dispatch will have.
func ExampleNewRetryTimer() {
	due := time.Date(2024, 1, 15, 17, 40, 0, 0, time.UTC)
	id, err := naming.NewRetryTimer("run1", "extract", naming.Attempt(2), due)
	if err != nil {
		panic(err)
	}
	fmt.Println(id)
	fmt.Println(id.CloudTaskID())
	// Output:
	// timer:retry:run1:extract:2:1705340400
	// t_czy34pp53hemqo7umlryk7qh5w
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
	_, err = naming.NewDispatch("run1", "extract:v2", naming.Attempt(1))
	fmt.Println(err)
	// Output:
	// true
	// internal ID
	// invalid internal ID: task_key "extract:v2" contains ':' (the separator); allowed: [A-Za-z0-9._-]
}

func ExampleIdentity() {
	for _, identity := range []naming.Identity{naming.Attempt(1), naming.CallerKey("evt-42")} {
		id, err := naming.NewDispatch("run1", "extract", identity)
		if err != nil {
			panic(err)
		}
		fmt.Println(identity, "->", id)
	}
	// Output:
	// attempt 1 -> dispatch:run1:extract:1
	// caller key "evt-42" -> dispatch:run1:extract:k-kdfo6u43zxiplof3rajyylplvs
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
	var forgotten naming.Identity
	_, err := naming.NewDispatch("run1", "extract", forgotten)
	fmt.Println(err)
	// Output:
	// invalid internal ID: identity "" is not set: the request must say which attempt it is; use naming.Attempt(n), naming.CallerKey(key) or naming.Unique()
}
