// Module hooks for the benchmark harness. `mitata` resolves to a generated module that re-exports the real
// mitata but replaces `run()`: it runs the benchmarks in mitata's "quiet" format (so a bench file may print its
// own lines, e.g. ratios, without mixing them with mitata's output), appends a JSON summary line to the file
// named by STORMLOG_BENCH_OUT, and returns mitata's own result so the bench file can still use it.
const PREFIX = "stormlog-bench-mitata:";

export async function resolve(specifier, context, nextResolve) {
  if (specifier === "mitata") {
    const real = await nextResolve(specifier, context);
    return { url: PREFIX + real.url, format: "module", shortCircuit: true };
  }
  return nextResolve(specifier, context);
}

export async function load(url, context, nextLoad) {
  if (url.startsWith(PREFIX)) {
    return { format: "module", source: shimSource(url.slice(PREFIX.length)), shortCircuit: true };
  }
  return nextLoad(url, context);
}

function shimSource(realUrl) {
  const real = JSON.stringify(realUrl);
  return `
import * as mitata from ${real};
import { appendFileSync } from "node:fs";
export * from ${real};

function summarize(result, file) {
  const layout = result.layout ?? [];
  const runs = [];
  for (const trial of result.benchmarks ?? []) {
    const group = layout[trial.group]?.name ?? null;
    for (const r of trial.runs ?? []) {
      if (r.error !== undefined || !r.stats) {
        runs.push({ group, name: r.name, args: r.args ?? {}, error: String(r.error?.message ?? r.error) });
        continue;
      }
      const s = r.stats;
      runs.push({
        group, name: r.name, args: r.args ?? {},
        stats: { min: s.min, max: s.max, avg: s.avg, p25: s.p25, p50: s.p50, p75: s.p75, p99: s.p99,
          p999: s.p999, samples: Array.isArray(s.samples) ? s.samples.length : null, ticks: s.ticks ?? null },
      });
    }
  }
  const c = result.context ?? {};
  return { runtime: c.runtime ?? null, version: c.version ?? null, arch: c.arch ?? null, cpu: c.cpu?.name ?? null, runs };
}

export async function run(opts = {}) {
  const result = await mitata.run({ ...opts, format: "quiet" });
  const out = process.env.STORMLOG_BENCH_OUT;
  if (out) appendFileSync(out, JSON.stringify(summarize(result)) + "\\n");
  return result;
}
`;
}
