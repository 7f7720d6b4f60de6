import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { loadTelemetryEvents } from "@stormlog/sink";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { finished, REPO_ROOT, runCli, spawnCli, tempDir } from "./helpers.js";

// A real Prometheus server (Debian's `prometheus`, installed by scripts/setup.sh) scrapes
// `stormlog track --prometheus-port` on loopback; its HTTP API must return the tracked child's memory
// as the sink recorded it.

const PROMETHEUS = "/usr/bin/prometheus";

/** Holds 64 MB until the stop file appears, after writing the ready file. */
const HOLD_UNTIL_STOPPED = `
const fs = require("node:fs");
const keep = Buffer.alloc(64 * 1024 * 1024);
for (let i = 0; i < keep.length; i += 4096) keep[i] = 1;
fs.writeFileSync(process.argv[2], "ready");
const timer = setInterval(() => {
  if (fs.existsSync(process.argv[3])) { clearInterval(timer); process.exit(keep[0] === 1 ? 0 : 9); }
}, 20);
`;

let dir: ReturnType<typeof tempDir>;
const started: ChildProcess[] = [];
beforeEach(() => {
  dir = tempDir("stormlog-prometheus-");
  writeFileSync(join(dir.path, "hold.cjs"), HOLD_UNTIL_STOPPED);
});
afterEach(() => {
  for (const child of started.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
  dir.remove();
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const start = Date.now();
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

interface PromSample {
  metric: Record<string, string>;
  value: [number, string];
}

async function query(api: string, promql: string): Promise<PromSample[]> {
  const response = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(promql)}`);
  const body = (await response.json()) as { status: string; data: { result: PromSample[] } };
  expect(body.status).toBe("success");
  return body.data.result;
}

describe("stormlog track --prometheus-port", () => {
  it("is scraped by a real Prometheus server, whose API returns the child's memory as recorded", async () => {
    expect(existsSync(PROMETHEUS), `${PROMETHEUS} is missing: run bash scripts/setup.sh`).toBe(true);
    const sink = join(dir.path, "sink");
    const ready = join(dir.path, "ready");
    const stop = join(dir.path, "stop");
    const track = spawnCli(
      [
        "track",
        "--interval",
        "0.05",
        "--no-gpu",
        "--telemetry-sink-dir",
        sink,
        "--telemetry-flush-seconds",
        "0.2",
        "--job-id",
        "prom-job",
        "--prometheus-port",
        "0",
        "--",
        process.execPath,
        join(dir.path, "hold.cjs"),
        ready,
        stop,
      ],
      { cwd: dir.path },
    );
    started.push(track);
    const tracking = finished(track);
    let stderr = "";
    track.stderr?.on("data", (chunk) => (stderr += chunk));
    const target = await until("the metrics endpoint", async () => {
      const match = /metrics: http:\/\/(127\.0\.0\.1:\d+)\/metrics/.exec(stderr);
      return match?.[1];
    });

    const webPort = await freePort();
    writeFileSync(
      join(dir.path, "prometheus.yml"),
      [
        "global:",
        "  scrape_interval: 250ms",
        "  scrape_timeout: 200ms",
        "scrape_configs:",
        "  - job_name: stormlog",
        "    static_configs:",
        `      - targets: ["${target}"]`,
        "",
      ].join("\n"),
    );
    const prometheus = spawn(
      PROMETHEUS,
      [
        `--config.file=${join(dir.path, "prometheus.yml")}`,
        `--storage.tsdb.path=${join(dir.path, "tsdb")}`,
        `--web.listen-address=127.0.0.1:${webPort}`,
        "--log.level=warn",
      ],
      { cwd: dir.path, stdio: ["ignore", "ignore", "pipe"] },
    );
    started.push(prometheus);
    const api = `http://127.0.0.1:${webPort}`;
    await until("the child to hold its memory", async () => (existsSync(ready) ? true : undefined));

    // Scraped more than once, with the child holding its 64 MB.
    const memory = await until("stormlog_memory_allocated in Prometheus", async () => {
      const result = await query(api, 'stormlog_memory_allocated{stormlog_job_id="prom-job"}');
      const value = Number(result[0]?.value[1]);
      return result.length === 1 && value > 64 * 1024 * 1024 ? result[0] : undefined;
    });
    expect(memory.metric).toMatchObject({
      job: "stormlog",
      stormlog_rank: "0",
      stormlog_device: "-1",
      stormlog_collector: "stormlog.cpu_tracker",
    });
    const rss = await query(api, 'process_memory_usage{stormlog_job_id="prom-job"}');
    expect(rss).toHaveLength(1);
    const healthy = await query(
      api,
      'stormlog_collector_health{stormlog_job_id="prom-job",stormlog_collector_state="healthy"}',
    );
    expect(healthy.map((sample) => sample.value[1])).toEqual(["1"]);
    const rssValue = Number(rss[0]?.value[1]);
    // Every query docs/live-metrics.md gives is valid PromQL on this server; the memory one finds the rank.
    const documented = [
      ...readFileSync(join(REPO_ROOT, "docs/live-metrics.md"), "utf8").matchAll(/```promql\n([\s\S]*?)```/g),
    ]
      .flatMap((block) => (block[1] ?? "").split("\n"))
      .filter((line) => line.trim() !== "");
    expect(documented.length).toBeGreaterThanOrEqual(5);
    for (const promql of documented) await query(api, promql);
    const top = await query(api, documented[0]!);
    expect(top.map((sample) => sample.metric.stormlog_rank)).toEqual(["0"]);

    writeFileSync(stop, "stop");
    const done = await tracking;
    expect(done.code).toBe(0);
    prometheus.kill("SIGTERM");

    // Every value Prometheus stored is a reading the sink recorded (exact integers, not re-derived).
    const samples = (await loadTelemetryEvents(sink)).filter((event) => event.event_type === "sample");
    const recorded = new Set(samples.map((event) => event.allocator_allocated_bytes));
    expect(recorded.has(Number(memory.value[1]))).toBe(true);
    const recordedRss = new Set(samples.map((event) => event.metadata.rss_bytes));
    expect(recordedRss.has(rssValue)).toBe(true);
  }, 90_000);

  it("refuses a port in use with a one-line error before running anything", async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", () => resolve()));
    const { port } = blocker.address() as { port: number };
    const marker = join(dir.path, "ran");
    try {
      const run = await runCli(
        [
          "track",
          "--no-gpu",
          "--telemetry-sink-dir",
          join(dir.path, "sink"),
          "--prometheus-port",
          String(port),
          "--",
          process.execPath,
          "-e",
          `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "x")`,
        ],
        { cwd: dir.path },
      );
      expect(run.code).toBe(1);
      expect(run.stderr).toMatch(
        new RegExp(`cannot serve metrics on 127\\.0\\.0\\.1:${port}: the address is in use`),
      );
      expect(run.stderr).not.toMatch(/\n\s+at /);
      // The command never started.
      expect(existsSync(marker)).toBe(false);
    } finally {
      blocker.close();
    }
  });

  it("checks the port's range", async () => {
    const run = await runCli(["track", "--prometheus-port", "70000", "--", "true"], { cwd: dir.path });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/invalid --prometheus-port '70000': expected a number <= 65535/);
  });
});
