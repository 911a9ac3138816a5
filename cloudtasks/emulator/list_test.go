package emulator_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

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

// TestListTasksRefusesForeignToken checks that a page token the emulator
// did not hand out is refused with InvalidArgument naming it.
func TestListTasksRefusesForeignToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.ListTasks(context.Background(), &cloudtaskspb.ListTasksRequest{Parent: queue, PageToken: "not a token!"}).Next()
	requireCode(t, err, codes.InvalidArgument, `page_token "not a token!" is not one this server returned`)
}

// TestListTasksTokenOfAnotherName checks a token that names no task of the
// queue (the emulator's tokens are the base64url of the last name shown):
// the page starts after that name in name order, as for any other token.
func TestListTasksTokenOfAnotherName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, id := range []string{"b", "a"} {
		_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/" + id)})
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		after string
		want  []string
	}{
		{loc + "/queues/a", []string{"a", "b"}},              // sorts before every task of q
		{queue + "/tasks/", []string{"a", "b"}},              // the bare prefix
		{queue + "/tasks/a\x00", []string{"b"}},              // just after a
		{queue + "/tasks/aaaaaaaaaaaaaaaaaa", []string{"b"}}, // longer than the compared head
		{loc + "/queues/z", nil},                             // sorts after every task of q
	} {
		it := b.client.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{Parent: queue})
		var tasks []*cloudtaskspb.Task
		_, err := iterator.NewPager(it, 10, base64.RawURLEncoding.EncodeToString([]byte(tc.after))).NextPage(&tasks)
		require.NoError(t, err, tc.after)
		var got []string
		for _, tk := range tasks {
			got = append(got, strings.TrimPrefix(tk.Name, queue+"/tasks/"))
		}
		require.Equal(t, tc.want, got, "after %q", tc.after)
	}
}
