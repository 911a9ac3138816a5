package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"golang.org/x/sync/errgroup"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
)

// benchTasks is how many tasks the benchmark queue holds.
const benchTasks = 100_000

// benchOutbox returns the outbox the page benchmarks read: the directory
// in CONSOLE_BENCH_OUTBOX (made with outbox/internal/gendata, for example
// -rows 5000000), or else a 200,000-row one generated the same way.
func benchOutbox(b *testing.B) string {
	if dir := os.Getenv("CONSOLE_BENCH_OUTBOX"); dir != "" {
		return dir
	}
	dir := filepath.Join(b.TempDir(), "outbox")
	cmd := exec.Command("go", "run", "../../outbox/internal/gendata", "-rows", "200000", "-files", "4", "-out", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Skipf("cannot generate an outbox with gendata (set CONSOLE_BENCH_OUTBOX): %v\n%s", err, out)
	}
	return dir
}

// bareQueue holds the same tasks as workQueue without the Idempotency-Key
// header, so the queue page has to find every internal ID in the outbox.
const bareQueue = location + "/queues/bare"

// benchConsole starts an emulator whose two queues each hold benchTasks
// tasks named like the first IDs gendata writes (so each is in the
// outbox): in workQueue with the dispatcher's Idempotency-Key header, in
// bareQueue without. It returns a console over the emulator and the outbox.
func benchConsole(b *testing.B) (*Server, string) {
	ctx := context.Background()
	dir := benchOutbox(b)
	emu, err := emulator.New(emulator.Config{Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DisableDelivery: true,
		Queues: []emulator.QueueConfig{{Name: workQueue}, {Name: bareQueue}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { emu.Close() })
	client, err := emu.NewClient(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, queue := range []string{workQueue, bareQueue} {
		for start := 0; start < benchTasks; start += 100 {
			g.Go(func() error { return createBenchTasks(gctx, client, queue, start, 100) })
		}
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	if n := emu.TaskCount(); n != 2*benchTasks {
		b.Fatalf("queues hold %d tasks, want %d", n, 2*benchTasks)
	}
	srv, err := New(ctx, Config{Emulator: emu.Addr(), EmulatorHTTP: emu.HTTPAddr(), Outbox: dir, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	return srv, dir
}

// createBenchTasks creates gendata's IDs start to start+n as tasks of
// queue in one batch.
func createBenchTasks(ctx context.Context, client *cloudtasks.Client, queue string, start, n int) error {
	req := &cloudtaskspb.BatchCreateTasksRequest{Parent: queue}
	for i := start; i < start+n; i++ {
		// gendata's i-th ID: 500 tasks of 2 attempts per run.
		id, err := naming.NewDispatch(fmt.Sprintf("run%d", i/1000), fmt.Sprintf("task%d", i/2%500), naming.Attempt(uint64(i%2+1)))
		if err != nil {
			return err
		}
		h := &cloudtaskspb.HttpRequest{Url: "https://worker.example.com/run", Body: []byte(`{"run":1}`),
			HttpMethod: cloudtaskspb.HttpMethod_POST}
		if queue == workQueue {
			h.Headers = map[string]string{"Idempotency-Key": id.String(), "Content-Type": "application/json"}
		}
		req.Requests = append(req.Requests, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
			Name: queue + "/tasks/" + id.CloudTaskID(), MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: h},
		}})
	}
	op, err := client.BatchCreateTasks(ctx, req)
	if err != nil {
		return err
	}
	_, err = op.Wait(ctx)
	return err
}

// BenchmarkPages measures the server time of the pages that read the most:
// the queues page, the first and a later page of a 100,000-task queue, and
// a run of 1,000 IDs in the outbox. It reports the median and the 99th
// percentile of single requests as p50-ms and p99-ms.
func BenchmarkPages(b *testing.B) {
	srv, _ := benchConsole(b)
	// A later page starts where the first one's "next" link points.
	_, next, err := srv.listTaskPage(context.Background(), workQueue, "")
	if err != nil {
		b.Fatal(err)
	}
	// The baseline: the one ListTasks call a queue page makes, alone.
	b.Run("baseline-listtasks", func(b *testing.B) {
		took := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if _, _, err := srv.listTaskPage(context.Background(), workQueue, ""); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		reportPercentiles(b, took)
	})
	for _, page := range []struct {
		name, path string
		cold       bool // forget the internal IDs found before
	}{
		{"queues", "/", false},
		{"queue-first-page", "/queue?name=" + url.QueryEscape(workQueue), false},
		{"queue-second-page", "/queue?name=" + url.QueryEscape(workQueue) + "&page=" + url.QueryEscape(next), false},
		{"queue-without-keys-cold", "/queue?name=" + url.QueryEscape(bareQueue), true},
		{"queue-without-keys-warm", "/queue?name=" + url.QueryEscape(bareQueue), false},
		{"run-1000-ids", "/run?id=run7", false},
		{"audit-by-cloud-task-id", "/audit?q=" + url.QueryEscape(mustCloudID(b, "run3", "task17", "1")), false},
		{"outbox", "/outbox", false},
	} {
		b.Run(page.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for b.Loop() {
				if page.cold { // untimed: let the last view's lookups end, forget their finds
					srv.bg.Wait()
					srv.ids = idCache{max: idCacheSize}
				}
				start := time.Now()
				serve(b, srv, page.path)
				took = append(took, time.Since(start))
			}
			reportPercentiles(b, took)
		})
	}
}

// reportPercentiles reports the median and the 99th percentile of single
// requests as p50-ms and p99-ms.
func reportPercentiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
	b.ReportMetric(ms(took[min(len(took)-1, len(took)*99/100)]), "p99-ms")
}

func serve(b *testing.B, srv *Server, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		b.Fatalf("%s: HTTP %d: %.300s", path, rec.Code, rec.Body.String())
	}
	return rec
}

func mustCloudID(b *testing.B, run, task, attempt string) string {
	id, err := naming.Parse("dispatch:" + run + ":" + task + ":" + attempt)
	if err != nil {
		b.Fatal(err)
	}
	return id.CloudTaskID()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkOutboxHealthPass measures the background pass behind the outbox
// page's figures (Stats and the stale Pending records of both tables),
// which no request waits for.
func BenchmarkOutboxHealthPass(b *testing.B) {
	dir := benchOutbox(b)
	srv, err := New(context.Background(), Config{Outbox: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	for b.Loop() {
		srv.health.mu.Lock()
		srv.health.snap = healthSnapshot{}
		srv.health.mu.Unlock()
		srv.health.get()
		srv.health.wait()
	}
	if e := srv.health.get().Err; e != "" {
		b.Fatal(e)
	}
}
