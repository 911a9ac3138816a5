package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// storeFlagsOf lists, as "COMMAND --FLAG", every flag of the command tree
// under root that names a store: the flags checkStoreFlags checks.
func storeFlagsOf(root *cobra.Command) []string {
	var found []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, name := range storeFlagNames(c) {
			found = append(found, strings.TrimPrefix(c.CommandPath(), "ctdispatch ")+" --"+name)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return found
}

// The flags the malformed-URL test goes through are every flag of every
// command that takes a store: a new one joins the list (and the test) by
// its name.
func TestStoreFlagsAreEveryCommandsStores(t *testing.T) {
	t.Parallel()
	env := Env{}.withDefaults()
	require.Equal(t, []string{
		"bench --outbox", "compact --iceberg-catalog", "compact --outbox", "console --outbox", "console --worker-outbox", "demo --outbox",
		"dispatch --export-to", "dispatch --outbox", "export --outbox", "export --to", "export refused --outbox", "import --from", "import --outbox",
		"migrate --outbox", "query --outbox", "query --worker-outbox", "recover --export-to", "recover --outbox",
		"relay --export-to", "relay --outbox", "retain --outbox", "stats --outbox", "timer --export-to", "timer --outbox",
		"worker cleanup --dsn", "worker migrate --dsn",
	}, storeFlagsOf(newRootCmd(&env)))
}

// The password every malformed value below carries; no piece of it may be
// printed.
const secret = "s3cr3t"

// malformedStores are PostgreSQL connection strings with a password that
// no command can use, each with what migrate answers.
var malformedStores = []struct {
	value, migrate string
}{
	{"postgres://user:s3cr3t@127.0.0.1:notaport/app",
		`--outbox postgres://user:xxxxx@127.0.0.1:notaport/app is not a valid URL: invalid port after host; percent-encode reserved characters in the user name and password (% as %25, @ as %40, / as %2F, : as %3A)`},
	{"postgres://user:s3cr3t%zz@127.0.0.1/app",
		`--outbox postgres://user:xxxxx@127.0.0.1/app is not a valid URL: invalid URL escape; percent-encode reserved characters in the user name and password (% as %25, @ as %40, / as %2F, : as %3A)`},
	{"postgres://user:s3cr3t/x@127.0.0.1/app", // the URL parser takes "user:s3cr3t" for the host and its port
		`--outbox postgres://user:xxxxx@127.0.0.1/app is not a valid URL: invalid port after host; percent-encode reserved characters in the user name and password (% as %25, @ as %40, / as %2F, : as %3A)`},
	{"postgres://user:s3cr3t@127.0.0.1:99999/app",
		`--outbox postgres://user:xxxxx@127.0.0.1:99999/app is not a PostgreSQL connection string the driver reads: invalid port`},
	{"postgresql://user:s3cr3t@[::1/app",
		`--outbox postgresql://user:xxxxx@[::1/app is not a valid URL: missing ']' in host; percent-encode reserved characters in the user name and password (% as %25, @ as %40, / as %2F, : as %3A)`},
	{"postgres://127.0.0.1/app?password=s3cr3t&sslmode=bogus",
		`--outbox postgres://127.0.0.1/app?password=xxxxx&sslmode=bogus is not a PostgreSQL connection string the driver reads: failed to configure TLS (sslmode is invalid)`},
	{"host=127.0.0.1 port=1 user=app password=s3cr3t dbname=app",
		`--outbox host=127.0.0.1 port=1 user=app password=xxxxx dbname=app is a key=value PostgreSQL connection string; give a database as a URL, postgres://USER@HOST:PORT/DBNAME?sslmode=…, with its password in $PGPASSWORD or ~/.pgpass (a directory whose name starts with WORD= is written ./WORD=…)`},
	{"host=127.0.0.1 password='s3cr3t x' dbname=app",
		`--outbox host=127.0.0.1 password=xxxxx dbname=app is a key=value PostgreSQL connection string; give a database as a URL, postgres://USER@HOST:PORT/DBNAME?sslmode=…, with its password in $PGPASSWORD or ~/.pgpass (a directory whose name starts with WORD= is written ./WORD=…)`},
	{"Postgres://user:s3cr3t@127.0.0.1/app",
		`--outbox Postgres://user:xxxxx@127.0.0.1/app is not a PostgreSQL URL: its scheme is written postgres:// or postgresql://, in lower case with two slashes`},
	{"postgres:/user:s3cr3t@127.0.0.1/app",
		`--outbox postgres:/user:xxxxx@127.0.0.1/app is not a PostgreSQL URL: its scheme is written postgres:// or postgresql://, in lower case with two slashes`},
	{"user:s3cr3t@127.0.0.1:5432/app",
		`--outbox user:xxxxx@127.0.0.1:5432/app looks like USER:PASSWORD@HOST without a scheme; write postgres://USER:PASSWORD@HOST/DBNAME, or ./user:xxxxx@127.0.0.1:5432/app for a directory of that name`},
	{"pg://user:s3cr3t@127.0.0.1/app",
		`--outbox "pg://user:xxxxx@127.0.0.1/app": scheme "pg" unknown; allowed: a directory, gs://BUCKET[?prefix=P/], s3://BUCKET[?region=R&prefix=P/] or mem://`},
	{"postgres://user:s3cr3t@127.0.0.1:1/app?connect_timeout=2", // well formed; nothing listens
		`outbox: cannot reach PostgreSQL: failed to connect to ` + "`user=user database=app`" + `: 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused`},
}

// storeArgs are the flags each command needs besides its store to get as
// far as opening it.
var storeArgs = map[string][]string{
	"dispatch": {"--project", "p", "--location", "l", "--queue", "q", "--run", "r", "--task", "t", "--attempt", "1", "--url", "https://w.example/x"},
	"timer":    {"--project", "p", "--location", "l", "--queue", "q", "--run", "r", "--task", "t", "--attempt", "1", "--due", "2030-01-01T00:00:00Z", "--url", "https://w.example/x"},
	"relay":    {"--project", "p", "--location", "l", "--queue", "q", "--once"},
	"retain":   {"--older-than", "1h"},
	"query":    {"--run", "r"},
	"export":   {"--once"},
	"bench":    {"--count", "1"},
}

// A malformed PostgreSQL value with a password, given to every flag of
// every command that takes a store (and, for --outbox, through
// $CTDISPATCH_OUTBOX), is refused without a piece of its password on
// stdout or stderr (with -v, so log lines count too) and without a
// directory made for it. Not parallel: it runs in a directory of its own,
// where a value taken for a relative path would be created.
func TestMalformedPostgresValuesShowNoPasswordAndMakeNoDirectory(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	env := Env{}.withDefaults()
	flags := storeFlagsOf(newRootCmd(&env))
	// The store export and import need besides the one under test, an
	// empty directory outside cwd, so that cwd holds only what a value made.
	other := map[string][]string{"export": {"--to", t.TempDir()}, "import": {"--from", t.TempDir()}}
	runs := 0
	for _, m := range malformedStores {
		for _, cf := range flags {
			path, flag, _ := strings.Cut(cf, " --")
			if strings.HasPrefix(m.value, "postgres://user:s3cr3t@127.0.0.1:1/") && path == "bench" {
				continue // well formed, it would run the memory modes' benchmark before failing
			}
			args := append(append([]string{"-v"}, strings.Fields(path)...), storeArgs[path]...)
			if o, ok := other[path]; ok && o[0] != "--"+flag {
				args = append(args, o...)
			}
			vars := map[string]string{emulatorEnv: "127.0.0.1:1"}
			code, stdout, stderr := runIn(t, vars, append(args, "--"+flag, m.value)...)
			runs++
			require.NotEqual(t, 0, code, "%v: %s", args, stderr)
			require.NotContains(t, stdout+stderr, "cr3t", "%v", args)
			require.Contains(t, stderr, "ctdispatch: ", "%v", args)
			if path == "migrate" {
				require.Equal(t, "ctdispatch: "+m.migrate+"\n", stderr, "%v", args)
			}
			if flag == "outbox" && path != "bench" && path != "demo" {
				vars[outboxEnv] = m.value
				code, stdout, stderr = runIn(t, vars, args...)
				runs++
				require.NotEqual(t, 0, code, "%v with $%s: %s", args, outboxEnv, stderr)
				require.NotContains(t, stdout+stderr, "cr3t", "%v with $%s", args, outboxEnv)
			}
		}
	}
	entries, err := os.ReadDir(cwd)
	require.NoError(t, err)
	require.Empty(t, entries, "after %d runs, a value was taken for a directory", runs)
}

// runIn runs the CLI in-process with the environment variables in vars.
func runIn(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, Env{Out: &out, Err: &errb, Getenv: func(k string) string { return vars[k] }})
	return code, out.String(), errb.String()
}

// $CTDISPATCH_OUTBOX stands in for a missing --outbox, and its value is
// named as coming from there; a given --outbox wins; bench and demo, whose
// --outbox is a scratch location, never take it.
func TestOutboxFromTheEnvironment(t *testing.T) {
	t.Parallel()
	bad := "host=db password=" + secret
	for _, c := range []struct {
		args     []string
		code     int
		stderr   string
		fromFlag string // the --outbox value the command ends with, when checked
	}{
		{[]string{"migrate"}, 2, "ctdispatch: --outbox (from $CTDISPATCH_OUTBOX) host=db password=xxxxx is a key=value PostgreSQL connection string", ""},
		{[]string{"stats"}, 2, "ctdispatch: --outbox (from $CTDISPATCH_OUTBOX) host=db password=xxxxx is a key=value", ""},
		{[]string{"migrate", "--outbox", "./box"}, 2, `ctdispatch: --outbox "./box" is not a PostgreSQL URL`, ""},
	} {
		code, _, stderr := runIn(t, map[string]string{outboxEnv: bad}, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		require.True(t, strings.HasPrefix(stderr, c.stderr), "%v: %s", c.args, stderr)
	}
	env := Env{Getenv: func(string) string { return bad }}.withDefaults()
	root := newRootCmd(&env)
	for _, path := range []string{"bench", "demo"} {
		cmd, _, err := root.Find([]string{path})
		require.NoError(t, err)
		require.NoError(t, checkStoreFlags(cmd, &env))
		require.Empty(t, cmd.Flags().Lookup("outbox").Value.String(), "%s took $%s", path, outboxEnv)
	}
}

// redact hides the password of every form a store value takes, parsed or
// not, and leaves a value without one as it is.
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"postgres://app:s3cr3t@db/app?sslmode=require", "postgres://app:xxxxx@db/app?sslmode=require"},
		{"postgres://app@db/app", "postgres://app@db/app"},
		{"postgres://app:p@ss@db/app", "postgres://app:xxxxx@db/app"},
		{"postgres://app:pa?ss@db/app", "postgres://app:xxxxx@db/app"},
		{"postgres://db/app?sslmode=require&password=s3cr3t", "postgres://db/app?sslmode=require&password=xxxxx"},
		{"postgres://db/app?sslpassword=s3cr3t", "postgres://db/app?sslpassword=xxxxx"},
		{"host=db password=s3cr3t user=app", "host=db password=xxxxx user=app"},
		{`host=db password = 's3 cr\'3t' user=app`, "host=db password = xxxxx user=app"},
		{`host=db password=s3\ cr3t user=app`, "host=db password=xxxxx user=app"},
		{"app:s3cr3t@db/app", "app:xxxxx@db/app"},
		{"gs://bucket?prefix=p/", "gs://bucket?prefix=p/"},
		{"./outbox", "./outbox"},
		{"/data/a:b/c@d", "/data/a:b/c@d"},
	} {
		require.Equal(t, c.want, redact(c.in), c.in)
	}
}
