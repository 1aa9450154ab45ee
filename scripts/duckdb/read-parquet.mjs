// Prints the schema and row count of Parquet files as DuckDB reads them, as
// one JSON object: {"columns":[{"name","type","nullable"}],"rows":N,
// "spend":S,"ids":D,"raw_bytes":R} (S = sum of spend_micros, D = distinct
// click ids, R = bytes in the raw column: reading it checks that DuckDB
// accepts every raw payload).
// Usage: node read-parquet.mjs FILE...
import { DuckDBInstance } from '@duckdb/node-api';

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node read-parquet.mjs FILE...');
  process.exit(2);
}
const list = '[' + files.map((f) => "'" + f.replaceAll("'", "''") + "'").join(',') + ']';
const db = await DuckDBInstance.create(':memory:');
const con = await db.connect();
const schema = await con.runAndReadAll(
  `SELECT name, type, repetition_type FROM parquet_schema(${list}) WHERE num_children IS NULL OR num_children = 0`);
const seen = new Map();
for (const r of schema.getRowObjectsJson()) {
  if (!seen.has(r.name)) seen.set(r.name, { name: r.name, type: r.type, nullable: r.repetition_type !== 'REQUIRED' });
}
const counts = await con.runAndReadAll(
  `SELECT count(*)::BIGINT AS n, coalesce(sum(spend_micros), 0)::BIGINT AS spend, count(DISTINCT click_id)::BIGINT AS ids, coalesce(sum(octet_length(raw)), 0)::BIGINT AS raw_bytes FROM read_parquet(${list})`);
const c = counts.getRowObjectsJson()[0];
console.log(JSON.stringify({ columns: [...seen.values()], rows: Number(c.n), spend: Number(c.spend), ids: Number(c.ids), raw_bytes: Number(c.raw_bytes) }));
