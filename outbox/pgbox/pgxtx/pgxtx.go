// Package pgxtx lets a pgx transaction (pgx.Tx, from a *pgx.Conn or a
// *pgxpool.Pool) carry a dispatcher's DispatchTx and ScheduleTimerTx, for
// programs that use pgx directly rather than through database/sql (for
// which pgbox.SQLTx does the same). It is a package of its own so that
// programs that do not use pgx do not link it.
//
//	tx, err := pool.Begin(ctx)
//	…
//	res, err := d.DispatchTx(ctx, pgxtx.Tx(tx), req)
//	…
//	err = tx.Commit(ctx)
package pgxtx

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Tx returns tx as the transaction a dispatcher's DispatchTx and
// ScheduleTimerTx take. tx must be on the database of the dispatcher's
// pgbox outbox; the caller still commits or rolls it back.
func Tx(tx pgx.Tx) outbox.Tx { return pgxTx{tx} }

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t pgxTx) Query(ctx context.Context, query string, args ...any) (outbox.Rows, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil // pgx.Rows has outbox.Rows' methods
}
