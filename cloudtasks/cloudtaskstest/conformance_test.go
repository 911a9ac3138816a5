package cloudtaskstest_test

import (
	"context"
	"os"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/cloudtaskstest"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

func TestConformanceEmulator(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	srv, err := emulator.New(emulator.Config{Clock: clock, DisableDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	client, err := srv.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	cloudtaskstest.RunConformanceTests(t, func(*testing.T) cloudtaskstest.Target {
		return cloudtaskstest.Target{
			Client:          client,
			Location:        "projects/conformance/locations/here",
			Now:             clock.Now,
			Advance:         clock.Advance,
			NameReuseWindow: emulator.DefaultNameReuseWindow,
			InjectFault: func(method string, code codes.Code, commit bool) func() {
				require.NoError(t, srv.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{method}, Rate: 1, Code: code, CommitThenFail: commit}}}))
				return func() { require.NoError(t, srv.SetFaults(emulator.Faults{})) }
			},
		}
	})
}

// TestConformanceCloudTasks runs the suite against the real service when
// CTDISPATCH_CONFORMANCE_PROJECT and CTDISPATCH_CONFORMANCE_LOCATION are
// set, with Application Default Credentials.
func TestConformanceCloudTasks(t *testing.T) {
	project, location := os.Getenv("CTDISPATCH_CONFORMANCE_PROJECT"), os.Getenv("CTDISPATCH_CONFORMANCE_LOCATION")
	if project == "" || location == "" {
		t.Skip("set CTDISPATCH_CONFORMANCE_PROJECT and CTDISPATCH_CONFORMANCE_LOCATION (and Application Default Credentials) to run against Cloud Tasks")
	}
	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	cloudtaskstest.RunConformanceTests(t, func(*testing.T) cloudtaskstest.Target {
		return cloudtaskstest.Target{Client: client, Location: "projects/" + project + "/locations/" + location}
	})
}
