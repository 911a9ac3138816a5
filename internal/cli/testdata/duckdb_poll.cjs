// Runs one SQL statement in DuckDB every 100 ms until it returns a row or
// the deadline (argv[3], in seconds) passes, then prints the first row
// as JSON and the seconds it took: {"row":…,"seconds":…}. A glob that
// matches no file yet is an error DuckDB raises; it counts as no row.
// Used by freshness_test.go; needs @duckdb/node-api on NODE_PATH.
const { DuckDBInstance } = require('@duckdb/node-api');
(async () => {
  const [sql, deadline] = [process.argv[2], Number(process.argv[3])];
  const conn = await (await DuckDBInstance.create(':memory:')).connect();
  const start = process.hrtime.bigint();
  const seconds = () => Number(process.hrtime.bigint() - start) / 1e9;
  for (;;) {
    try {
      const rows = (await conn.runAndReadAll(sql)).getRowObjectsJson();
      if (rows.length > 0) {
        console.log(JSON.stringify({ row: rows[0], seconds: seconds() }));
        return;
      }
    } catch (e) {
      if (!/No files found/.test(e.message)) throw e;
    }
    if (seconds() > deadline) {
      console.error(`no row after ${deadline} s`);
      process.exit(2);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
})().catch((e) => { console.error(e.message); process.exit(1); });
