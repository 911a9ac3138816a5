import { DuckDBInstance } from '@duckdb/node-api';
const inst = await DuckDBInstance.create(':memory:');
const c = await inst.connect();
await c.run(`COPY (SELECT 'dispatch:s' || i || ':t:1' AS dispatch_id, h.cloud_task_id, 'created' AS status,
   i::BIGINT AS create_calls, TIMESTAMPTZ '2026-02-01 00:00:00+00' + to_seconds(i) AS created_at,
   TIMESTAMPTZ '2026-02-01 00:00:00+00' + to_seconds(i) AS updated_at
   FROM range(8) t(i) JOIN read_csv('s.csv') h USING (i)) TO 'duckdb_small_zstd.parquet' (FORMAT parquet, COMPRESSION zstd)`);
await c.run(`COPY (SELECT 'dispatch:s' || i || ':t:1' AS dispatch_id, h.cloud_task_id, 'created' AS status,
   i::INT AS create_calls, TIMESTAMP '2026-02-01 00:00:00' + to_seconds(i) AS created_at
   FROM range(8) t(i) JOIN read_csv('s.csv') h USING (i)) TO 'duckdb_small_snappy.parquet' (FORMAT parquet, COMPRESSION snappy)`);
await c.run(`COPY (SELECT 'dispatch:s' || i || ':t:1' AS dispatch_id, i AS status, i::DOUBLE AS create_calls
   FROM range(8) t(i)) TO 'duckdb_small_foreign.parquet' (FORMAT parquet, COMPRESSION uncompressed)`);
