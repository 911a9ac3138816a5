// Folds an outbox table's files in DuckDB on one thread the way
// `ctdispatch compact` does (the latest row per dispatch_id, sorted by
// dispatch_id, zstd) and prints the process CPU (user + sys) the COPY
// took, in seconds, and the output's size:
//   node compaction-bench-duckdb.cjs '<root>/dispatch_outbox/**/*.parquet' out.parquet
// Needs @duckdb/node-api on NODE_PATH (see .ci/run).
const { DuckDBInstance } = require('@duckdb/node-api');
const fs = require('fs');
(async () => {
  const [glob, out] = process.argv.slice(2);
  const conn = await (await DuckDBInstance.create(':memory:')).connect();
  await conn.run('SET threads = 1');
  const before = process.cpuUsage();
  await conn.run(`COPY (
      SELECT * EXCLUDE (rn) FROM (
        SELECT *, row_number() OVER (PARTITION BY dispatch_id ORDER BY updated_at DESC) AS rn
        FROM read_parquet('${glob}', hive_partitioning = false))
      WHERE rn = 1 ORDER BY dispatch_id)
    TO '${out}' (FORMAT parquet, COMPRESSION zstd)`);
  const used = process.cpuUsage(before);
  console.log(JSON.stringify({ cpu_s: (used.user + used.system) / 1e6, bytes: fs.statSync(out).size }));
})().catch((e) => { console.error(e.message); process.exit(1); });
