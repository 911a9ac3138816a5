package cli

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
)

// A flag that names a store (an outbox, a worker's outbox, an export's
// destination, a worker's inbox) may hold a PostgreSQL password. Every
// such value is checked before a command runs, so that a malformed one is
// refused before it is parsed by a library that would quote it or taken
// for a directory and created; and every message that shows one shows it
// through redact.

// outboxEnv gives --outbox to a command called without it, so that a
// database URL holding a password stays out of the argument list, which
// other users of the machine see (ps) and shells keep in their history.
const outboxEnv = "CTDISPATCH_OUTBOX"

// scratchOutbox is the annotation of a command whose --outbox is a scratch
// location the command fills and may empty (bench, demo): it never
// defaults to $CTDISPATCH_OUTBOX, which names the user's own outbox.
const scratchOutbox = "ctdispatch/scratch-outbox"

// storeFlags are the flags that name a store wherever they appear, with
// whether a key=value connection string is a valid value (only --dsn,
// which goes to the driver as it is). import's --from is one too (the
// --from of dispatch and timer is a file of requests).
// compact's --iceberg-catalog is one too: a catalog database's URL, or a
// REST catalog's http(s):// one (checkCatalogFlag).
var storeFlags = map[string]bool{"outbox": false, "worker-outbox": false, "to": false, "export-to": false, "dsn": true, "iceberg-catalog": false}

// documentOutboxEnv says in the help of every --outbox under cmd that
// takes $CTDISPATCH_OUTBOX that it does.
func documentOutboxEnv(cmd *cobra.Command) {
	if f := cmd.Flags().Lookup("outbox"); f != nil && cmd.Annotations[scratchOutbox] == "" {
		f.Usage += "; $" + outboxEnv + " when not given"
	}
	for _, sub := range cmd.Commands() {
		documentOutboxEnv(sub)
	}
}

// checkStoreFlags fills --outbox from $CTDISPATCH_OUTBOX when the command
// was called without it, and checks the value of every flag of cmd that
// names a store (checkStore).
func checkStoreFlags(cmd *cobra.Command, env *Env) error {
	fromEnv := false
	if f := cmd.Flags().Lookup("outbox"); f != nil && !f.Changed && cmd.Annotations[scratchOutbox] == "" {
		if v := env.Getenv(outboxEnv); v != "" {
			if err := f.Value.Set(v); err != nil {
				return usagef("$%s: %v", outboxEnv, err)
			}
			fromEnv = true
		}
	}
	for _, name := range storeFlagNames(cmd) {
		f := cmd.Flags().Lookup(name)
		label := "--" + name
		if name == "outbox" && fromEnv {
			label += " (from $" + outboxEnv + ")"
		}
		check := func() error { return checkStore(label, f.Value.String(), storeFlags[name]) }
		if name == "iceberg-catalog" {
			check = func() error { return checkCatalogFlag(f.Value.String()) }
		}
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// storeFlagNames are the names of cmd's flags that name a store, sorted.
func storeFlagNames(cmd *cobra.Command) []string {
	var names []string
	for name := range storeFlags {
		if cmd.Flags().Lookup(name) != nil {
			names = append(names, name)
		}
	}
	if cmd.Name() == "import" {
		names = append(names, "from")
	}
	slices.Sort(names)
	return names
}

// knownSchemes are the URL schemes of the stores a command may be given
// (which ones a command takes, it says itself).
var knownSchemes = map[string]bool{"gs": true, "s3": true, "mem": true}

// keyValueStart is the start of a key=value connection string
// ("host=db password=…"), which a directory name does not start with.
var keyValueStart = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// checkStore refuses a store value that is a PostgreSQL connection string
// no command can use: a postgres:// URL that does not parse, a key=value
// string (unless keyValueOK), or what looks like a URL with its scheme
// misspelled, unknown or left out. Anything else (a directory, a bucket
// URL) is left to the command.
func checkStore(label, v string, keyValueOK bool) error {
	switch {
	case v == "":
		return nil
	case keyValueStart.MatchString(v) && !keyValueOK:
		return usagef("%s %s is a key=value PostgreSQL connection string; give a database as a URL, postgres://USER@HOST:PORT/DBNAME?sslmode=…, with its password in $PGPASSWORD or ~/.pgpass (a directory whose name starts with WORD= is written ./WORD=…)", label, redact(v))
	case keyValueStart.MatchString(v), isPostgresURL(v):
		return checkPostgres(label, v)
	}
	lower := strings.ToLower(v)
	if strings.HasPrefix(lower, "postgres:") || strings.HasPrefix(lower, "postgresql:") {
		return usagef("%s %s is not a PostgreSQL URL: its scheme is written postgres:// or postgresql://, in lower case with two slashes", label, redact(v))
	}
	if scheme, _, ok := strings.Cut(v, "://"); ok && !keyValueOK && !knownSchemes[scheme] {
		return checkBucketFlag(label, v)
	}
	if first, _, _ := strings.Cut(v, "/"); !strings.Contains(v, "://") && strings.Contains(first, ":") && strings.Contains(first, "@") {
		return usagef("%s %s looks like USER:PASSWORD@HOST without a scheme; write postgres://USER:PASSWORD@HOST/DBNAME, or ./%s for a directory of that name", label, redact(v), redact(v))
	}
	return nil
}

// checkPostgres checks a PostgreSQL connection string as the driver (pgx)
// and, for a URL, Go's URL parser (which reads its ctdispatch_
// parameters) will read it. The errors name the value redacted and the
// parsers' reasons without the values they quote.
func checkPostgres(label, v string) error {
	if isPostgresURL(v) {
		if _, err := url.Parse(v); err != nil {
			return usagef("%s %s is not a valid URL: %s; percent-encode reserved characters in the user name and password (%% as %%25, @ as %%40, / as %%2F, : as %%3A)", label, redact(v), urlReason(err))
		}
	}
	if _, err := pgconn.ParseConfig(v); err != nil {
		return usagef("%s %s is not a PostgreSQL connection string the driver reads: %s", label, redact(v), pgReason(err))
	}
	return nil
}

// quoted is a Go-quoted value inside an error message.
var quoted = regexp.MustCompile(`\s*"(?:[^"\\]|\\.)*"`)

// urlReason is why url.Parse refused a URL, without the URL and the parts
// of it that net/url quotes (a bad escape or port may be a piece of the
// password).
func urlReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return quoted.ReplaceAllString(err.Error(), "")
}

// pgReason is why the driver refused a connection string, without the
// string it quotes (redacted by the driver, best effort) before its
// reason.
func pgReason(err error) string {
	msg := err.Error()
	if _, reason, ok := strings.Cut(msg, "`: "); ok && strings.HasPrefix(msg, "cannot parse `") {
		msg = reason
	}
	return redact(msg)
}

var (
	// schemePrefix is a URL's scheme and the slashes after it (without
	// a slash, "user:password@host" would read as scheme "user").
	schemePrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:/+`)
	// keyValuePassword is a password in a key=value connection string:
	// quoted (with backslash escapes), or up to the next unescaped space.
	keyValuePassword = regexp.MustCompile(`(?i)(\w*password\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])*)`)
	// queryPassword is a password given as a URL's query parameter.
	queryPassword = regexp.MustCompile(`(?i)([?&]\w*password=)[^&#]*`)
)

// redact returns a store value fit to print: the password of a URL (in
// its user information or its query) or of a key=value connection
// string replaced by xxxxx, as url.URL.Redacted does. It works on values
// no parser accepts too, masking more rather than less when the value is
// ambiguous (an @ in the query). Anything without a password is returned
// as it is. Every message that shows a store value shows it through
// redact.
func redact(v string) string {
	if keyValueStart.MatchString(v) {
		return keyValuePassword.ReplaceAllString(v, "${1}xxxxx")
	}
	v = queryPassword.ReplaceAllString(v, "${1}xxxxx")
	scheme := schemePrefix.FindString(v)
	rest := v[len(scheme):]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return v
	}
	if first, _, _ := strings.Cut(rest, "/"); scheme == "" && !strings.Contains(first, "@") {
		return v // a path with an @ further down
	}
	user, _, password := strings.Cut(rest[:at], ":")
	if !password {
		return v
	}
	return scheme + user + ":xxxxx" + rest[at:]
}
