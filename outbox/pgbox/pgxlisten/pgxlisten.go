// Package pgxlisten listens for a pgbox outbox's notifications on a pgx
// connection of its own, so that a dispatcher's relay is woken by the
// commit of a transaction that recorded an intent (DispatchTx,
// ScheduleTimerTx, CancelTx) instead of waiting for its next poll, and
// WaitOutcome by the relay that recorded the outcome. It is a package of
// its own, beside pgxtx, so that programs that do not use pgx do not link
// it: package pgbox stays on database/sql, whose pooled connections
// cannot hold a LISTEN.
//
//	l, err := pgxlisten.New(pgxlisten.Config{ConnString: os.Getenv("DATABASE_URL")})
//	…
//	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{…, Listener: l})
//
// The listener holds one connection outside any pool for as long as the
// dispatcher runs; it must reach the server itself, or a pooler in
// session mode. A pooler in transaction mode (PgBouncer's default)
// accepts LISTEN and delivers nothing: the relay then finds intents at
// its poll (cloudtasks.Config.RelayInterval) only. When the connection
// drops (a restarted server, a terminated backend, a network fault) the
// listener connects again with capped exponential backoff and tells the
// dispatcher, which looks for work at once, since notifications sent
// meanwhile are lost.
package pgxlisten

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Defaults of Config.
const (
	// DefaultReconnectInitial is Config.ReconnectInitial's default.
	DefaultReconnectInitial = 100 * time.Millisecond
	// DefaultReconnectMax is Config.ReconnectMax's default.
	DefaultReconnectMax = 5 * time.Second
)

// Config says where a Listener connects and how it comes back.
type Config struct {
	// ConnString names the database, as pgx.ParseConfig reads it: a
	// postgres:// URL or key=value settings, the ones the outbox's
	// database/sql pool was opened with. Exactly one of ConnString and
	// ConnConfig is required.
	ConnString string
	// ConnConfig is a parsed connection config, for example a pgxpool's
	// (pool.Config().ConnConfig). The listener uses a copy.
	ConnConfig *pgx.ConnConfig
	// ReconnectInitial is the wait before the first reconnection after
	// the connection dropped or could not be made; each failed attempt
	// doubles it, up to ReconnectMax, with up to half of it drawn at
	// random so that many listeners do not return at once. Defaults to
	// DefaultReconnectInitial (100ms).
	ReconnectInitial time.Duration
	// ReconnectMax caps the wait between reconnections. Defaults to
	// DefaultReconnectMax (5s).
	ReconnectMax time.Duration
	// Logger receives a warning when the connection drops or cannot be
	// made (once per run of failures) and a line when it listens again.
	// Defaults to discarding.
	Logger *slog.Logger
}

// Listener is an outbox.Listener over a pgx connection of its own. Each
// Listen call opens its own connection, so one Listener may serve several
// dispatchers.
type Listener struct {
	conn         *pgx.ConnConfig
	initial, max time.Duration
	log          *slog.Logger
}

var _ outbox.Listener = (*Listener)(nil)

// New checks cfg and returns a Listener; it connects only when Listen is
// called. Errors name the field: a ConnString pgx cannot parse, both or
// neither of ConnString and ConnConfig, a negative or inverted backoff.
func New(cfg Config) (*Listener, error) {
	if cfg.ReconnectInitial == 0 {
		cfg.ReconnectInitial = DefaultReconnectInitial
	}
	if cfg.ReconnectMax == 0 {
		cfg.ReconnectMax = DefaultReconnectMax
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case (cfg.ConnString == "") == (cfg.ConnConfig == nil):
		return nil, fmt.Errorf("pgxlisten: Config.ConnString and Config.ConnConfig: set exactly one (ConnString %t, ConnConfig %t)",
			cfg.ConnString != "", cfg.ConnConfig != nil)
	case cfg.ReconnectInitial < 0:
		return nil, fmt.Errorf("pgxlisten: Config.ReconnectInitial %s is negative", cfg.ReconnectInitial)
	case cfg.ReconnectMax < cfg.ReconnectInitial:
		return nil, fmt.Errorf("pgxlisten: Config.ReconnectMax %s is below ReconnectInitial (%s)", cfg.ReconnectMax, cfg.ReconnectInitial)
	}
	conn := cfg.ConnConfig
	if conn == nil {
		var err error
		if conn, err = pgx.ParseConfig(cfg.ConnString); err != nil {
			return nil, fmt.Errorf("pgxlisten: Config.ConnString: %w", err)
		}
	}
	return &Listener{conn: conn.Copy(), initial: cfg.ReconnectInitial, max: cfg.ReconnectMax, log: cfg.Logger}, nil
}

// Listen implements outbox.Listener: it connects, runs LISTEN on channel,
// calls notify("") and then notify(payload) for each notification, until
// ctx ends; a connection that fails or drops is made again after a
// backoff, and notify("") is called again once it listens. It returns
// ctx.Err(), or at once an error for an empty channel.
func (l *Listener) Listen(ctx context.Context, channel string, notify func(payload string)) error {
	if channel == "" {
		return errors.New("pgxlisten: listen: the channel is empty (the outbox sends no notifications: pgbox.Config.NoNotify)")
	}
	var failures uint64 // in a row
	for {
		err := l.session(ctx, channel, notify, &failures)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		failures++
		if failures == 1 {
			l.log.WarnContext(ctx, "pgxlisten: not listening; relays poll until the connection is back", "channel", channel, "err", err)
		}
		delay := l.max
		if n := failures - 1; n < 32 && l.initial<<n > 0 && l.initial<<n < l.max {
			delay = l.initial << n // doubling from initial, capped at max
		}
		delay -= time.Duration(rand.Int64N(int64(delay)/2 + 1))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// session runs one connection: connect, LISTEN, then deliver until it
// fails. failures is reset once LISTEN succeeds.
func (l *Listener) session(ctx context.Context, channel string, notify func(string), failures *uint64) error {
	conn, err := pgx.ConnectConfig(ctx, l.conn)
	if err != nil {
		return err
	}
	defer func() {
		// A bounded close of its own: ctx may have ended, and a dead
		// server must not hold the caller.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx) //nolint:errcheck // the connection is being dropped
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	if *failures > 0 {
		l.log.InfoContext(ctx, "pgxlisten: listening again", "channel", channel, "after_failures", *failures)
	}
	*failures = 0
	notify("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel == channel {
			notify(n.Payload)
		}
	}
}
