package emulator_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// TestListTasksPagesResumeAfterChanges reads a queue three tasks at a
// time while tasks are created and deleted between pages: each page goes
// on after the last name of the one before, whether or not that task
// still exists, and shows the tasks created since only when their names
// sort after it.
func TestListTasksPagesResumeAfterChanges(t *testing.T) {
	t.Parallel()
	// Created in no particular order; listed by name.
	initial := []string{"m", "a", "k", "c", "i", "e", "g"}
	type page struct {
		create, delete []string // applied before the page is read
		purge          bool     // purge the queue before the page is read
		want           []string
		more           bool // a next-page token comes back
	}
	for _, tc := range []struct {
		name  string
		pages []page
	}{
		{"unchanged", []page{
			{want: []string{"a", "c", "e"}, more: true},
			{want: []string{"g", "i", "k"}, more: true},
			{want: []string{"m"}},
		}},
		{"the token's own task and an earlier one deleted", []page{
			{want: []string{"a", "c", "e"}, more: true},
			{delete: []string{"e", "c"}, want: []string{"g", "i", "k"}, more: true},
			{delete: []string{"k"}, want: []string{"m"}},
		}},
		{"the next tasks deleted", []page{
			{want: []string{"a", "c", "e"}, more: true},
			{delete: []string{"g", "k"}, want: []string{"i", "m"}},
		}},
		{"everything after the token deleted", []page{
			{want: []string{"a", "c", "e"}, more: true},
			{delete: []string{"g", "i", "k", "m"}, want: nil},
		}},
		{"tasks created before and after the token", []page{
			{want: []string{"a", "c", "e"}, more: true},
			{create: []string{"b", "f", "d", "e1", "z"}, want: []string{"e1", "f", "g"}, more: true},
			{create: []string{"h"}, want: []string{"h", "i", "k"}, more: true},
			{want: []string{"m", "z"}},
		}},
		{"the token's task deleted and another created after it", []page{
			{want: []string{"a", "c", "e"}, more: true},
			{delete: []string{"e"}, create: []string{"f"}, want: []string{"f", "g", "i"}, more: true},
			{want: []string{"k", "m"}},
		}},
		{"purged between pages, then refilled", []page{
			{want: []string{"a", "c", "e"}, more: true},
			{purge: true, create: []string{"b", "x", "y"}, want: []string{"x", "y"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *emulator.Config) { c.NameReuseWindow = -1 })
			ctx := context.Background()
			create := func(ids []string) {
				for _, id := range ids {
					_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/" + id)})
					require.NoError(t, err)
				}
			}
			create(initial)
			token := ""
			for i, p := range tc.pages {
				if p.purge {
					_, err := b.client.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{Name: queue})
					require.NoError(t, err)
				}
				for _, id := range p.delete {
					require.NoError(t, b.client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: queue + "/tasks/" + id}))
				}
				create(p.create)
				it := b.client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: queue})
				var tasks []*cloudtaskspb.Task
				next, err := iterator.NewPager(it, 3, token).NextPage(&tasks)
				require.NoError(t, err, "page %d", i+1)
				var got []string
				for _, tk := range tasks {
					got = append(got, strings.TrimPrefix(tk.Name, queue+"/tasks/"))
				}
				require.Equal(t, p.want, got, "page %d", i+1)
				require.Equal(t, p.more, next != "", "page %d: next page token %q", i+1, next)
				token = next
			}
		})
	}
}

// TestPageTokensAreBoundToTheirRequest: a page token the emulator did not
// return for this very request (another queue's, another filter's,
// another server's, a forged or edited one, or one older than the
// documented 2 hours) is InvalidArgument; the token of the page before is
// accepted, also by the last moment of its lifetime and with another page
// size.
func TestPageTokensAreBoundToTheirRequest(t *testing.T) {
	t.Parallel()
	// Time budget: about a second (three emulators, a few dozen RPCs).
	other := loc + "/queues/other"
	b := setup(t, func(c *emulator.Config) { c.Queues = append(c.Queues, emulator.QueueConfig{Name: other}) })
	ctx := context.Background()
	for _, q := range []string{queue, other} {
		for _, id := range []string{"a", "b", "c"} {
			_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: q, Task: httpTask(q + "/tasks/" + id)})
			require.NoError(t, err)
		}
	}
	taskToken := func(t *testing.T, client *cloudtasks.Client, parent string) string {
		resp, err := rawListTasks(ctx, client, &cloudtaskspb.ListTasksRequest{Parent: parent, PageSize: 1})
		require.NoError(t, err)
		require.NotEmpty(t, resp.NextPageToken)
		return resp.NextPageToken
	}
	mine, theirs := taskToken(t, b.client, queue), taskToken(t, b.client, other)
	elsewhere := setup(t) // another server, same queue name and clock time
	_, err := elsewhere.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/a")})
	require.NoError(t, err)
	_, err = elsewhere.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/b")})
	require.NoError(t, err)
	foreign := taskToken(t, elsewhere.client, queue)
	edited := []byte(mine)
	edited[5] = map[bool]byte{true: 'B', false: 'A'}[edited[5] == 'A'] // another issue time, same MAC

	notReturned := func(token string) string {
		return `page_token "` + shortToken(token) + `" was not returned by this server for this request; a token is valid only for the parent and filter of the call that returned it`
	}
	for _, tc := range []struct {
		name, token, msg string
	}{
		{"another queue's token", theirs, notReturned(theirs)},
		{"another server's token", foreign, notReturned(foreign)},
		{"a forged token: the base64 of a name", base64.RawURLEncoding.EncodeToString([]byte(queue + "/tasks/a")), notReturned(base64.RawURLEncoding.EncodeToString([]byte(queue + "/tasks/a")))},
		{"an edited token", string(edited), notReturned(string(edited))},
		{"not base64", "not a token!", `page_token "not a token!" is malformed: it is not one this server returned`},
		{"too short", "AAAA", `page_token "AAAA" is malformed: it is not one this server returned`},
	} {
		_, err := rawListTasks(ctx, b.client, &cloudtaskspb.ListTasksRequest{Parent: queue, PageToken: tc.token})
		requireCode(t, err, codes.InvalidArgument, tc.msg)
	}

	// ListQueues binds parent and filter: "It is an error to switch the
	// value of the filter while iterating through pages."
	qresp, err := b.client.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{Parent: loc, PageSize: 1}).Next()
	require.NoError(t, err)
	require.Equal(t, other, qresp.Name)
	queuesResp, err := rawListQueues(ctx, b.client, &cloudtaskspb.ListQueuesRequest{Parent: loc, PageSize: 1})
	require.NoError(t, err)
	qtok := queuesResp.NextPageToken
	require.NotEmpty(t, qtok)
	_, err = rawListQueues(ctx, b.client, &cloudtaskspb.ListQueuesRequest{Parent: loc, PageToken: qtok, Filter: "state: RUNNING"})
	requireCode(t, err, codes.InvalidArgument, notReturned(qtok))
	_, err = rawListQueues(ctx, b.client, &cloudtaskspb.ListQueuesRequest{Parent: "projects/p/locations/m", PageToken: qtok})
	requireCode(t, err, codes.InvalidArgument, notReturned(qtok))
	_, err = rawListTasks(ctx, b.client, &cloudtaskspb.ListTasksRequest{Parent: queue, PageToken: qtok})
	requireCode(t, err, codes.InvalidArgument, notReturned(qtok))
	queuesResp, err = rawListQueues(ctx, b.client, &cloudtaskspb.ListQueuesRequest{Parent: loc, PageToken: qtok, PageSize: 5})
	require.NoError(t, err, "another page size is allowed")
	require.Equal(t, []string{queue}, queueNames(queuesResp.Queues))

	// Valid for 2 hours on the emulator's clock, then refused.
	b.clock.Advance(2 * time.Hour)
	resp, err := rawListTasks(ctx, b.client, &cloudtaskspb.ListTasksRequest{Parent: queue, PageToken: mine, PageSize: 10})
	require.NoError(t, err)
	require.Equal(t, []string{queue + "/tasks/b", queue + "/tasks/c"}, taskNames(resp.Tasks))
	b.clock.Advance(time.Nanosecond)
	_, err = rawListTasks(ctx, b.client, &cloudtaskspb.ListTasksRequest{Parent: queue, PageToken: mine})
	requireCode(t, err, codes.InvalidArgument, `page_token "`+shortToken(mine)+`" expired: it was issued at 2026-01-02T03:04:05Z and a page token is valid for 2h0m0s`)
}

// rawListTasks makes one ListTasks call and returns its response, page
// token included (the client's iterator hides it).
func rawListTasks(ctx context.Context, client *cloudtasks.Client, req *cloudtaskspb.ListTasksRequest) (*cloudtaskspb.ListTasksResponse, error) {
	it := client.ListTasks(ctx, req)
	_, err := it.Next()
	if err != nil && err != iterator.Done {
		return nil, err
	}
	resp, _ := it.Response.(*cloudtaskspb.ListTasksResponse)
	return resp, nil
}

// rawListQueues makes one ListQueues call and returns its response.
func rawListQueues(ctx context.Context, client *cloudtasks.Client, req *cloudtaskspb.ListQueuesRequest) (*cloudtaskspb.ListQueuesResponse, error) {
	it := client.ListQueues(ctx, req)
	_, err := it.Next()
	if err != nil && err != iterator.Done {
		return nil, err
	}
	resp, _ := it.Response.(*cloudtaskspb.ListQueuesResponse)
	return resp, nil
}

func taskNames(tasks []*cloudtaskspb.Task) []string {
	var out []string
	for _, tk := range tasks {
		out = append(out, tk.Name)
	}
	return out
}

func queueNames(queues []*cloudtaskspb.Queue) []string {
	var out []string
	for _, q := range queues {
		out = append(out, q.Name)
	}
	return out
}

// shortToken is a token as the emulator's messages quote it.
func shortToken(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
