package cli

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// defaultIcebergGrace is --iceberg-grace's default, lakehouse.DefaultGrace
// (a test of the iceberg build checks they agree): the flags are the same
// in every build, so that a build without Iceberg names them in its
// refusal and its help.
const defaultIcebergGrace = time.Hour

// errNoIceberg is the error of a command that needs Iceberg publication in
// a ctdispatch built without it (ADR 0017: linking iceberg-go costs every
// command its start-up, so the default build leaves it out).
var errNoIceberg = errors.New("this ctdispatch was built without Iceberg publication; build one with: go build -tags iceberg -o bin/ctdispatch ./cmd/ctdispatch")

// icebergFlags are compact's flags that turn the root's Iceberg
// publication on or off and say where it goes.
type icebergFlags struct {
	on, off bool
	catalog string
	grace   time.Duration
	flags   *pflag.FlagSet
}

// register adds the flags to fs.
func (f *icebergFlags) register(fs *pflag.FlagSet) {
	f.flags = fs
	fs.BoolVar(&f.on, "iceberg", false, "turn Iceberg publication on for this outbox (remembered: later runs publish without the flag), then compact and publish")
	fs.BoolVar(&f.off, "no-iceberg", false, "turn Iceberg publication off for this outbox (its files stay as they are), then compact as before")
	fs.StringVar(&f.catalog, "iceberg-catalog", "", `with --iceberg: the Iceberg catalog, recorded in the outbox; "" is the file-based one under _iceberg/ (a directory only), postgres://… the SQL catalog, http(s)://… a REST catalog`)
	fs.DurationVar(&f.grace, "iceberg-grace", defaultIcebergGrace, "with --iceberg: how long a replaced snapshot, and the files only it names, stay readable")
}

// changed reports whether the flag name was given.
func (f *icebergFlags) changed(name string) bool { return f.flags.Changed(name) }

// checkCatalogFlag checks --iceberg-catalog: "", a PostgreSQL URL or an
// http(s) URL.
func checkCatalogFlag(v string) error {
	switch {
	case v == "":
		return nil
	case isPostgresURL(v):
		return checkPostgres("--iceberg-catalog", v)
	case strings.HasPrefix(v, "http://"), strings.HasPrefix(v, "https://"):
		return nil
	}
	return usagef("--iceberg-catalog %s: want postgres://… (the SQL catalog), http(s)://… (a REST catalog), or nothing for the file-based catalog", redact(v))
}

// redactCatalog is a catalog URL as the root records it (without its
// password).
func redactCatalog(v string) string {
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return v
	}
	if _, ok := u.User.Password(); ok {
		// As package lakehouse writes it in the root's switch.
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// errNotPublished is the error of a command that reads the Iceberg
// tables of an outbox that does not publish them.
func errNotPublished(dir string) error {
	return fmt.Errorf("outbox %s does not publish Iceberg tables; turn publication on with: ctdispatch compact --outbox %s --iceberg", redact(dir), redact(dir))
}
