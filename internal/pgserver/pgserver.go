// Package pgserver starts a throwaway PostgreSQL cluster from the Debian
// postgresql package's binaries (/usr/lib/postgresql/*/bin): initdb, then
// postgres on a Unix socket in a temporary directory, and hands out new
// databases in it. Tests reach it through internal/testtools/pgtest; the
// chaos suite's e2e scenario starts one for itself, so the CLI links this
// package and not package testing.
//
// initdb and postgres refuse to run as root, which is how CI and these
// machines run, so when the process is root both run as the postgres
// user, in a directory given to that user. The server also gets a
// parent-death signal, so a process that is killed does not leave it
// running. Durability against a machine crash is traded for speed (fsync
// off, no full-page writes): the cluster is thrown away. A crash of the
// server alone loses nothing committed (commits are synchronous, and the
// kernel keeps what was written), which is what Restart relies on.
package pgserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// binGlob is where Debian's postgresql packages put the server binaries.
const binGlob = "/usr/lib/postgresql/*/bin"

// startTimeout bounds how long the server may take to accept connections.
const startTimeout = 30 * time.Second

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	dir    string   // owns data/ and the socket
	owner  *os.File // holds ownerFile's lock while the cluster lives
	socket string
	bin    string
	cred   *syscall.Credential
	admin  *sql.DB
	dbSeq  atomic.Int64

	mu     sync.Mutex // guards the running server, which Restart replaces
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *serverLog
}

// serverLog keeps what the server writes; the process's output copier
// writes it while a failed start or restart reads it.
type serverLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// MissingError says that no PostgreSQL server binaries were found.
type MissingError struct {
	// Glob is where they were looked for.
	Glob string
}

// Error says what is missing and how to install it.
func (e *MissingError) Error() string {
	return fmt.Sprintf("needs postgresql: no initdb under %s; install it with: apt-get install postgresql", e.Glob)
}

// binDir returns the newest installed version's bin directory.
func binDir() (string, error) {
	dirs, _ := filepath.Glob(binGlob)
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			found = append(found, d)
		}
	}
	if len(found) == 0 {
		return "", &MissingError{Glob: binGlob}
	}
	sort.Slice(found, func(i, j int) bool { return versionOf(found[i]) < versionOf(found[j]) })
	return found[len(found)-1], nil
}

func versionOf(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

// Start initialises and starts a cluster. Most callers use New instead.
func Start() (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	removeAbandoned()
	// A short path: the socket's full name must fit in 107 bytes.
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, socket: dir, bin: bin, cred: cred}
	if c.owner, err = own(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.start(); err != nil {
		os.RemoveAll(dir)
		c.owner.Close()
		return nil, err
	}
	return c, nil
}

// dirPrefix names the clusters' directories in the temporary directory.
const dirPrefix = "pgtest-"

// ownerFile is locked (flock) by the process a cluster belongs to for as
// long as it lives; the kernel drops the lock when that process dies.
const ownerFile = "owner.lock"

// own takes the lock of a new cluster directory. The lock file is locked
// under another name and then renamed: another process looking for
// abandoned directories never sees an owner.lock that is not yet locked.
func own(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, ownerFile+".new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ownerFile)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// removeAbandoned deletes the directories of clusters whose test binary
// died without stopping them (a test timeout panics past Main); their
// server died with it, by its parent-death signal. A directory whose owner
// lock can be taken has no owner left; one without the lock file yet is
// being set up, and is left alone.
func removeAbandoned() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		f, err := os.OpenFile(filepath.Join(d, ownerFile), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(d)
		}
		f.Close()
	}
}

// serverCredential is the postgres user's when the process is root (the
// server refuses root), and nil (run as ourselves) otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses root, but there is no postgres user to run it as: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (c *Cluster) start() error {
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return err
		}
	}
	initdb := exec.Command(filepath.Join(c.bin, "initdb"), "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	initdb.Dir = c.dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := c.launch(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	admin, err := sql.Open("pgx", c.dsn("postgres"))
	if err != nil {
		return errors.Join(err, c.Stop())
	}
	c.admin = admin
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		return errors.Join(fmt.Errorf("postgres did not start: %w; its log: %s", err, c.log()), c.Stop())
	}
	return nil
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

// launch starts the server process on the cluster's data directory.
func (c *Cluster) launch() error {
	// postgres itself, not pg_ctl: as our child it gets a parent-death
	// signal (set after the switch of user, so the switch does not clear
	// it), and SIGINT from Stop is its fast shutdown. Commits are
	// synchronous: with fsync off that costs one write per commit, and an
	// immediate shutdown (Restart) then loses no acknowledged commit.
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data(),
		"-k", c.socket, "-c", "listen_addresses=", "-c", "fsync=off",
		"-c", "full_page_writes=off", "-c", "synchronous_commit=on",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = c.dir
	logs := &serverLog{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() //nolint:errcheck // exit seen through exited
	c.mu.Lock()
	c.cmd, c.exited, c.logs = cmd, exited, logs
	c.mu.Unlock()
	return nil
}

// running returns the server process and its exit channel.
func (c *Cluster) running() (*exec.Cmd, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd, c.exited
}

// log returns what the running server wrote so far.
func (c *Cluster) log() string {
	c.mu.Lock()
	logs := c.logs
	c.mu.Unlock()
	if logs == nil {
		return ""
	}
	return logs.String()
}

// Restart crashes the server and starts it again on the same data
// directory and socket, as `pg_ctl restart -m immediate` does: SIGQUIT
// ends every backend at once without a checkpoint, and the new server
// replays the WAL before it accepts connections. Committed transactions
// survive; every connection open before the restart is dead (its next
// use fails) and new ones work once Restart returns. The server runs as
// the same user as before. Restart must not run concurrently with Stop.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Crash(ctx); err != nil {
		return fmt.Errorf("pgserver: restart: %w", err)
	}
	if err := c.StartAgain(ctx); err != nil {
		return fmt.Errorf("pgserver: restart: %w", err)
	}
	return nil
}

// Crash is the first half of Restart: it ends the server at once
// (SIGQUIT, an immediate shutdown) and returns once it has exited. Until
// StartAgain, connections fail; a test holds the server down that way
// while it makes its client fail.
func (c *Cluster) Crash(ctx context.Context) error {
	cmd, exited := c.running()
	if cmd == nil || cmd.Process == nil {
		return errors.New("pgserver: crash: the server is not running")
	}
	select {
	case <-exited:
		return fmt.Errorf("pgserver: crash: the server had exited: %s", firstLines(c.log()))
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return fmt.Errorf("pgserver: crash: immediate shutdown: %w", err)
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pgserver: crash: waiting for the immediate shutdown: %w", ctx.Err())
	}
}

// StartAgain is the second half of Restart: it starts the server after
// Crash, on the same data directory and socket, and returns once it
// accepts connections (after replaying the WAL).
func (c *Cluster) StartAgain(ctx context.Context) error {
	if err := c.launch(); err != nil {
		return fmt.Errorf("pgserver: start again: %w", err)
	}
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("pgserver: start again: postgres did not start: %w; its log: %s", err, firstLines(c.log()))
	}
	return nil
}

// firstLines shortens a server log for an error message.
func firstLines(s string) string {
	const most = 2000
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}

// waitReady polls until the server answers; a server starting up has no
// event to wait on.
func (c *Cluster) waitReady(ctx context.Context) error {
	_, exited := c.running()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.admin.PingContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the server exited")
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

func (c *Cluster) dsn(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", c.socket, db)
}

// CreateDatabase creates a new empty database and returns its DSN and a
// function that drops it.
func (c *Cluster) CreateDatabase(ctx context.Context) (dsn string, drop func() error, err error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.dbSeq.Add(1))
	if _, err := c.admin.ExecContext(ctx, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop = func() error {
		// WITH (FORCE) ends sessions a test left open (a killed child's).
		_, err := c.admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	return c.dsn(name), drop, nil
}

// Stop shuts the server down (fast shutdown: sessions are ended) and
// removes its files.
func (c *Cluster) Stop() error {
	if c.admin != nil {
		c.admin.Close()
	}
	var err error
	if cmd, exited := c.running(); cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(startTimeout):
			_ = cmd.Process.Kill()
			<-exited
			err = errors.New("postgres did not stop within 30s of SIGINT; killed")
		}
	}
	err = errors.Join(err, os.RemoveAll(c.dir))
	if c.owner != nil {
		c.owner.Close()
	}
	return err
}
