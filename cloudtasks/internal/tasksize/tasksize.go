// Package tasksize holds the one Cloud Tasks task-size limit and the one
// way of measuring a task against it, shared by the dispatcher (which must
// never send a task the service refuses) and the emulator (which must
// refuse what the service refuses).
//
// # What Google documents
//
// The Cloud Tasks quotas page gives the maximum task size as "1MB" for
// HTTP targets (the CreateTask comment in the v2 protos still says 100KB,
// the App Engine limit). It says neither which bytes count nor whether a
// megabyte is 10^6 or 2^20 bytes.
//
// # What this package decides
//
// Max is the smaller reading, 1,000,000 bytes, and Of counts the widest
// reading of "the task": the whole Task message as serialized on the wire
// (name, schedule time, URL, method, headers, body, token settings,
// dispatch deadline, retry settings). A task that passes here is within
// 1 MB under every reading, so the dispatcher never sends a task the
// service could refuse for its size; the emulator, using the same measure,
// refuses some tasks (between 10^6 and 2^20 bytes) that the service may
// accept, which errs on the side of finding the problem in a test.
package tasksize

import (
	"fmt"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/protobuf/proto"
)

// Max is the largest task, in bytes as Of measures it, that Cloud Tasks
// accepts for an HTTP target: 1 MB, read as 10^6 bytes (see the package
// documentation).
const Max = 1_000_000

// Of returns the size of t as the limit applies to it: the length of its
// protobuf wire encoding. A nil task has size 0.
func Of(t *cloudtaskspb.Task) int {
	return proto.Size(t)
}

// Check returns nil when t is within Max, and otherwise an error that
// gives the task's size and the limit.
func Check(t *cloudtaskspb.Task) error {
	if n := Of(t); n > Max {
		return fmt.Errorf("task is %d bytes; at most %d bytes (1 MB) are allowed", n, Max)
	}
	return nil
}
