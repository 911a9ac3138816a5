import { DuckDBInstance } from '@duckdb/node-api';
const inst = await DuckDBInstance.create(':memory:');
const c = await inst.connect();
await c.run(`COPY (SELECT TIMESTAMPTZ '2026-02-01 00:00:00+00' + to_seconds(i) + INTERVAL 1 SECOND AS updated_at,
             'dispatch:duck' || (i // 10) || ':task' || (i % 10) || ':1' AS dispatch_id,
             h.cloud_task_id AS cloud_task_id,
             'projects/p/locations/l/queues/duck' AS queue, 'duck' || (i // 10) AS run_id,
             'task' || (i % 10) AS task_key, '1' AS attempt,
             CASE WHEN i % 7 = 0 THEN 'pending' WHEN i % 11 = 0 THEN 'failed' ELSE 'created' END AS status,
             CASE WHEN i % 11 = 0 AND i % 7 <> 0 THEN 'PermissionDenied' END AS error_code,
             (i % 3)::BIGINT AS create_calls, sha256('p' || i) AS payload_sha256,
             '0b6f8e2a-3c1d-4f5e-8a9b-1c2d3e4f5a60' AS processor_uuid,
             TIMESTAMPTZ '2026-02-01 00:00:00+00' + to_seconds(i) AS created_at,
             'written by duckdb' AS note
      FROM range(2000) t(i) JOIN read_csv('dids.csv') h USING (i) ORDER BY hash(i))
TO 'duckdb_dispatch_outbox.parquet' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 500)`);
await c.run(`COPY (SELECT 'timer:retry:duck' || i || ':t:1:' || (1772323200 + i) AS timer_id,
             h.cloud_task_id AS cloud_task_id,
             'projects/p/locations/l/queues/duck' AS queue, 'duck' || i AS run_id, 't' AS task_key,
             '1' AS attempt, 'retry' AS kind, 'created' AS status, 1 AS create_calls,
             make_timestamp_ms(1772323200000 + i * 1000) AS due_at,
             make_timestamp(1772236800000000 + i) AS created_at,
             make_timestamp(1772236800000000 + i) AS updated_at
      FROM range(100) t(i) JOIN read_csv('tids.csv') h USING (i) ORDER BY i)
TO 'duckdb_timers.parquet' (FORMAT parquet, COMPRESSION zstd)`);
const r = await c.runAndReadAll(`select count(*) n, min(cloud_task_id) m from 'duckdb_dispatch_outbox.parquet'`);
console.log(JSON.stringify(r.getRowObjectsJson()));
