/**
 * Test inputs: a small run written as canonical JSONL (one rank, nested phases, samples, an alert,
 * an OOM error, a collector transition), with names the caller picks (hostile ones included), and
 * the browser the page tests drive.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type JsonObject, type TelemetryRecordV3 } from "@stormlog/core";
import { type Browser, chromium } from "playwright-core";

const MiB = 1024 * 1024;
const BASE_NS = 1_760_000_000_000_000_000n;

export interface RunOptions {
  /** The top-level phase's name and its child's. */
  readonly outer?: string;
  readonly inner?: string;
  /** An alert's context. */
  readonly alertContext?: string;
  readonly samples?: number;
  /** Device readings (a GPU run); false: the CPU tracker's host readings only. */
  readonly device?: boolean;
  readonly rank?: number;
  readonly sessionId?: string;
}

/** Writes a run to `dir/run.jsonl` (a fresh temp folder by default) and returns the file's path. */
export function writeRun(
  options: RunOptions = {},
  dir = mkdtempSync(join(tmpdir(), "stormlog-report-")),
): string {
  const outer = options.outer ?? "train";
  const inner = options.inner ?? "forward";
  const samples = options.samples ?? 400;
  const device = options.device ?? true;
  const rank = options.rank ?? 0;
  const sessionId = options.sessionId ?? "report-test-session";
  const lines: string[] = [];
  let allocated = 200 * MiB;
  const record = (
    ts: bigint,
    eventType: string,
    context: string | null,
    metadata: JsonObject,
  ): TelemetryRecordV3 => {
    const reserved = allocated + 64 * MiB;
    return {
      schema_version: 3,
      session_id: sessionId,
      timestamp_ns: ts,
      event_type: eventType,
      collector: device ? "stormlog.tfjs" : "stormlog.cpu_tracker",
      sampling_interval_ms: 10,
      pid: 4242,
      host: "test-host",
      job_id: null,
      rank,
      local_rank: rank,
      world_size: 1,
      device_id: device ? 0 : -1,
      allocator_allocated_bytes: allocated,
      allocator_reserved_bytes: reserved,
      allocator_active_bytes: null,
      allocator_inactive_bytes: null,
      allocator_change_bytes: 0,
      device_used_bytes: reserved + 32 * MiB,
      device_free_bytes: device ? 8192 * MiB : null,
      device_total_bytes: device ? 8192 * MiB + reserved + 32 * MiB : null,
      context,
      metadata,
    } as TelemetryRecordV3;
  };
  const emit = (r: TelemetryRecordV3): void => {
    lines.push(encodeTelemetryRecord(r));
  };
  let sequence = 0;
  const stack: { name: string; path: string[]; scope_id: string; parent: string | null }[] = [];
  const phase = (ts: bigint, action: "enter" | "exit", name: string): void => {
    sequence++;
    let scope = stack[stack.length - 1];
    if (action === "enter") {
      const parent = scope ?? null;
      scope = {
        name,
        path: parent === null ? [name] : [...parent.path, name],
        scope_id: `${sessionId}:${sequence}`,
        parent: parent?.scope_id ?? null,
      };
      stack.push(scope);
    } else stack.pop();
    const s = scope!;
    emit(
      record(
        ts,
        action === "enter" ? "phase_enter" : "phase_exit",
        `Phase ${action}: ${s.path.join(" / ")}`,
        {
          phase_scope: {
            action,
            name: s.name,
            path: s.path,
            depth: s.path.length,
            scope_id: s.scope_id,
            parent_scope_id: s.parent,
            thread_id: 1,
            thread_name: "main",
            sequence,
          },
        },
      ),
    );
  };
  const at = (i: number): bigint => BASE_NS + BigInt(i) * 10_000_000n;
  emit(record(at(0), "start", "Tracking started.", {}));
  phase(at(0) + 1000n, "enter", outer);
  for (let i = 1; i <= samples; i++) {
    const step = i % 40;
    if (step === 5) phase(at(i) - 1000n, "enter", inner);
    allocated += step >= 5 && step < 25 ? 4 * MiB : step >= 25 && step < 39 ? -5 * MiB : 0;
    if (i === Math.floor(samples / 2)) allocated += 300 * MiB;
    if (i === Math.floor(samples / 2) + 3) allocated -= 300 * MiB;
    emit(record(at(i), "sample", null, {}));
    if (step === 25) phase(at(i) + 1000n, "exit", inner);
    if (i === Math.floor(samples / 2))
      emit(record(at(i) + 2000n, "warning", options.alertContext ?? "allocated above 80%", {}));
    if (i === Math.floor(samples / 4))
      emit(
        record(at(i) + 3000n, "collector_degraded", "Collector degraded.", {
          collector_health_status: "degraded",
          collector_last_error: "read timed out",
        }),
      );
    if (i === Math.floor(samples / 4) + 5)
      emit(
        record(at(i) + 3000n, "collector_recovered", "Collector recovered.", {
          collector_health_status: "healthy",
        }),
      );
  }
  if (stack.length > 1) phase(at(samples) + 2000n, "exit", inner);
  emit(record(at(samples) + 4000n, "error", "Out of memory", { oom_reason: "allocation failed" }));
  phase(at(samples) + 5000n, "exit", outer);
  emit(record(at(samples + 1), "stop", "Tracking stopped.", {}));
  const file = join(dir, "run.jsonl");
  writeFileSync(file, `${lines.join("\n")}\n`);
  return file;
}

/** Headless Chromium from the system (scripts/setup.sh installs it), with no network and no GPU. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--no-first-run",
    ],
  });
}
