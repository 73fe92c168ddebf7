// Reads a demo output directory with DuckDB, a reader independent of
// servetrace, and checks it against servetrace's own manifest, run.json and
// analysis. Usage: node duckdb-check.mjs DEMO_OUT ANALYZE_JSON
import { DuckDBInstance } from '@duckdb/node-api';
import { readFileSync } from 'node:fs';

const [dir, analyzeJSON] = process.argv.slice(2);
const manifest = JSON.parse(readFileSync(`${dir}/trace/_manifest.json`, 'utf8'));
const run = JSON.parse(readFileSync(`${dir}/run/run.json`, 'utf8'));
const report = JSON.parse(readFileSync(analyzeJSON, 'utf8'));
const db = await (await DuckDBInstance.create(':memory:')).connect();
const one = async (q) => (await db.runAndReadAll(q)).getRowObjectsJson();
let failed = 0;
const check = (what, got, want) => {
  const ok = typeof want === 'number' ? Math.abs(Number(got) - want) < 1e-6 * Math.max(1, Math.abs(want)) : String(got) === String(want);
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}: duckdb ${got}, servetrace ${want}`);
  if (!ok) failed++;
};

const [t] = await one(`SELECT count(*) n, any_value(typeof(ts)) tstype
  FROM read_parquet('${dir}/trace/**/*.parquet', hive_partitioning = true)`);
check('trace rows', t.n, manifest.rows);
check('ts column type', t.tstype, 'TIMESTAMP WITH TIME ZONE');

const [r] = await one(`SELECT count(*) n, count(DISTINCT request_id) ids FROM '${dir}/run/results/*.parquet'`);
check('result rows', r.n, run.scheduled);
check('distinct request ids', r.ids, run.scheduled);
for (const row of await one(`SELECT outcome, count(*) n FROM '${dir}/run/results/*.parquet' GROUP BY 1`)) {
  check(`outcome ${row.outcome}`, row.n, run.outcomes[row.outcome]);
}
// DuckDB's median interpolates between the two middle values, as type 7 does.
const [m] = await one(`SELECT median((first_token_ns - sent_ns) / 1e6) ttft FROM '${dir}/run/results/*.parquet'
  WHERE outcome = 'ok' AND NOT warmup AND first_token_ns IS NOT NULL`);
const p50 = report.metrics.ttft_ms.percentiles.find((q) => q.p === 50).value;
check('TTFT p50 (ms)', m.ttft, p50);
process.exit(failed ? 1 : 0);
