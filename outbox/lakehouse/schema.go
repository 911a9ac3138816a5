package lakehouse

import (
	"fmt"

	"github.com/apache/iceberg-go"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// tables are the outbox's tables, in the order they are published.
var tables = []outbox.Table{outbox.TableDispatch, outbox.TableTimers, outbox.TableDeliveries}

// partitionField names the day partition in Iceberg. It is not a column
// of the files, and it is the name of their directories' Hive key, so an
// engine shows the same day under the same name either way.
const partitionField = "created_date"

// icebergSchema returns table t's columns as an Iceberg schema.
//
// Every column is optional: files written before a column was added
// (version, trace_id, span_id) lack it, and files other writers made
// (DuckDB, another store's export) may mark any column nullable; Iceberg
// reads a missing optional column as NULL. Integers are long, because
// create_calls is INT32 in some files and INT64 in others and Iceberg
// reads an INT32 column as a long (int to long is a promotion it allows),
// never the reverse; so are the deliveries table's other integer columns.
// The files carry no Iceberg field IDs: the table's name mapping (set by
// iceberg-go on the first registration) finds the columns by name.
func icebergSchema(t outbox.Table) (*iceberg.Schema, error) {
	cols := parquetbox.Columns(t)
	if cols == nil {
		return nil, fmt.Errorf("lakehouse: table %q is not an outbox table", t)
	}
	fields := make([]iceberg.NestedField, len(cols))
	for i, c := range cols {
		var typ iceberg.Type
		switch c.Kind {
		case parquetbox.ColumnString:
			typ = iceberg.PrimitiveTypes.String
		case parquetbox.ColumnInt:
			typ = iceberg.PrimitiveTypes.Int64
		case parquetbox.ColumnTime:
			typ = iceberg.PrimitiveTypes.TimestampTz
		default:
			return nil, fmt.Errorf("lakehouse: column %s of %s has kind %d, which has no Iceberg type here", c.Name, t, c.Kind)
		}
		fields[i] = iceberg.NestedField{ID: i + 1, Name: c.Name, Type: typ, Required: false}
	}
	return iceberg.NewSchema(0, fields...), nil
}

// partitionSpec partitions by the day of created_at, the day the files'
// created_date= directories name.
func partitionSpec(s *iceberg.Schema) (*iceberg.PartitionSpec, error) {
	f, ok := s.FindFieldByName("created_at")
	if !ok {
		return nil, fmt.Errorf("lakehouse: schema has no created_at column")
	}
	spec, err := iceberg.NewPartitionSpecOpts(iceberg.AddPartitionFieldBySourceID(f.ID, partitionField, iceberg.DayTransform{}, s, nil))
	if err != nil {
		return nil, err
	}
	return &spec, nil
}
