// Runs the docs' glob query over a live outbox again and again for a
// number of seconds, and prints one JSON object: how many runs, how many
// failed (with the first error), and how many counted a state (an ID and
// version) twice, and by how many rows at most. Used by
// iceberg_minute_test.go; needs @duckdb/node-api on NODE_PATH.
const { DuckDBInstance } = require('@duckdb/node-api');
const [glob, seconds] = process.argv.slice(2);
(async () => {
  const conn = await (await DuckDBInstance.create(':memory:')).connect();
  const sql = `SELECT count(*)::BIGINT AS n, count(DISTINCT dispatch_id || ':' || coalesce(version, 0) || ':' || status)::BIGINT AS states
    FROM read_parquet('${glob}', hive_partitioning = true, union_by_name = true)`;
  const end = Date.now() + Number(seconds) * 1000;
  const out = { runs: 0, failures: 0, doubled: 0, maxExtra: 0, firstError: '' };
  while (Date.now() < end) {
    out.runs++;
    try {
      const rows = (await conn.runAndReadAll(sql)).getRowObjectsJson();
      const extra = Number(rows[0].n) - Number(rows[0].states);
      if (extra > 0) { out.doubled++; out.maxExtra = Math.max(out.maxExtra, extra); }
    } catch (e) {
      out.failures++;
      if (!out.firstError) out.firstError = e.message.split('\n')[0];
    }
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e.message); process.exit(1); });
