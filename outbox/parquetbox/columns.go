package parquetbox

import (
	"strconv"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
)

// ColumnKind says how a column of the outbox's tables holds its values.
type ColumnKind uint8

// The kinds of columns.
const (
	// ColumnString holds text (BYTE_ARRAY, STRING).
	ColumnString ColumnKind = iota + 1
	// ColumnInt holds integers (INT32 or INT64).
	ColumnInt
	// ColumnTime holds times (INT64 TIMESTAMP(isAdjustedToUTC=true,
	// MICROS)); 0 stands for no time.
	ColumnTime
)

// Column is one column of a table the outbox writes, as its Parquet files
// and SQL over them name it. Columns lists them; a tool that shows records
// in the tables' terms (ctdispatch query does) derives its output from
// that list, so a column added to the tables shows there too.
type Column struct {
	// Name is the column's name in the files and in SQL.
	Name string
	// Kind is how the column holds its values.
	Kind ColumnKind
	// Optional columns hold NULL for an empty string; files written
	// before they were added lack them.
	Optional bool
	// ID marks the table's ID column (dispatch_id, timer_id or
	// delivery_id), which holds the record's ID.
	ID bool
	// Derived marks a column written for joins only, derived from the ID
	// and never read back: the deliveries table's dispatch_id and
	// timer_id, which repeat the internal ID under the other tables' name
	// for it.
	Derived bool

	col *tableschema.Column
}

// Columns returns the columns of table t in file order, or nil for a
// table the outbox does not have.
func Columns(t outbox.Table) []Column {
	if t.Validate() != nil {
		return nil
	}
	s := tableschema.SchemaOf(string(t))
	out := make([]Column, len(s.Columns))
	for i := range s.Columns {
		c := &s.Columns[i]
		out[i] = Column{Name: c.Name, Optional: c.Optional, ID: c.Field == tableschema.FieldID, Derived: c.Field == tableschema.FieldNone, col: c}
		switch c.Kind {
		case tableschema.String:
			out[i].Kind = ColumnString
		case tableschema.Timestamp:
			out[i].Kind = ColumnTime
		default:
			out[i].Kind = ColumnInt
		}
	}
	return out
}

// timeLayout is RFC 3339 with microseconds, the columns' resolution.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// Text returns the column's value in r as the table would store it, in
// text: a string as it is, an integer in decimal, a time in UTC as RFC
// 3339 with microseconds (2026-03-01T12:00:00.000001Z), or "" for none. A
// Column not from Columns has no value: "".
func (c Column) Text(r *outbox.Record) string {
	if c.col == nil {
		return ""
	}
	row := tableschema.RowOf(r)
	switch c.Kind {
	case ColumnString:
		return c.col.Str(&row)
	case ColumnTime:
		t := tableschema.FromMicros(c.col.Int(&row))
		if t.IsZero() {
			return ""
		}
		return t.Format(timeLayout)
	}
	return strconv.FormatInt(c.col.Int(&row), 10)
}
