// Runs each SQL statement given as an argument in DuckDB and prints its
// rows as one JSON array per statement. Used by duckdb_test.go; needs
// @duckdb/node-api on NODE_PATH.
const { DuckDBInstance } = require('@duckdb/node-api');
(async () => {
  const conn = await (await DuckDBInstance.create(':memory:')).connect();
  for (const sql of process.argv.slice(2)) {
    const res = await conn.runAndReadAll(sql);
    console.log(JSON.stringify(res.getRowObjectsJson()));
  }
})().catch((e) => { console.error(e.message); process.exit(1); });
