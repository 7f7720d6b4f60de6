/**
 * Generated runs for the Perfetto export's checks against its event oracle: several ranks and
 * sessions, nested and unclosed phases on two threads, boundary readings and repeated ones, alerts
 * (OOM, phase hints, float and `__proto__` metadata), collector-health transitions, lifecycle
 * records with capabilities, samples spelled as the reference's rules still take them ("Sample",
 * " Sample ", "ſample"), several devices and the host's, a host change, a late job id, equal
 * timestamps, a hidden-memory drift and a first-cause spike.
 */
import { type JsonObject, parseJson, type TelemetryEvent, type TelemetryRecordV3 } from "@stormlog/core";
import { BASE_NS, GiB, MiB, MS, record } from "../../../sink/test/support/telemetry-fixtures.js";

/** mulberry32: small, deterministic. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SAMPLE_SPELLINGS = ["sample", "sample", "sample", "Sample", " Sample ", "SAMPLE", "\u017fample"];

/** Options of `perfettoCase`. */
export interface PerfettoCaseOptions {
  readonly seed: number;
  readonly ranks: number;
  /**
   * `group`: one session per rank with one job id (a rank group on disk); `shared`: sessions that
   * each span every rank, so that a rank has several sessions.
   */
  readonly layout: "group" | "shared";
  /** Sessions when `shared` (default 2). */
  readonly sessions?: number;
  /** Steps of the training loop per session and rank (default 12). */
  readonly steps?: number;
}

/** The events of one generated run, in time order per session and rank, sessions one after another. */
export function perfettoCase(options: PerfettoCaseOptions): TelemetryEvent[] {
  const rand = random(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
  const steps = options.steps ?? 12;
  const sessions = options.layout === "group" ? 1 : (options.sessions ?? 2);
  const events: TelemetryEvent[] = [];
  for (let s = 0; s < sessions; s++) {
    for (let rank = 0; rank < options.ranks; rank++) {
      // Later sessions sort first: neither plan order nor storage order is time order.
      const sessionId =
        options.layout === "group" ? `run-rank${rank}` : `run-${String.fromCharCode(122 - s)}`;
      const jobId = options.layout === "group" ? "job-7" : null;
      const identity: Partial<TelemetryRecordV3> = {
        session_id: sessionId,
        rank,
        local_rank: rank % 2,
        world_size: options.ranks,
        pid: 1000 + rank,
        host: s === 0 ? `node-${rank >> 1}` : `node-${rank >> 1}-s${s}`,
        job_id: jobId,
        device_id: rank % 3 === 2 ? -1 : 0,
      };
      // Equal starts on some ranks and sessions: ties go by storage order.
      let now = BASE_NS + BigInt(s * 40 + (rank % 2 === 0 ? 0 : Math.floor(rand() * 5))) * MS;
      let allocated = 1 * GiB;
      let reserved = 2 * GiB;
      let gap = 128 * MiB;
      let sequence = 0;
      const total = 8 * GiB;
      const stack: {
        name: string;
        path: string[];
        scopeId: string;
        parent: string | null;
        thread: number;
      }[] = [];
      const push = (eventType: string, extra: Partial<TelemetryRecordV3> = {}): void => {
        events.push(
          record(eventType, now, {
            ...identity,
            allocator_allocated_bytes: allocated,
            allocator_reserved_bytes: reserved,
            device_used_bytes: reserved + gap,
            device_total_bytes: total,
            ...extra,
          }),
        );
      };
      const boundary = (action: "enter" | "exit", thread: number, name?: string): void => {
        let scope: (typeof stack)[number];
        if (action === "enter") {
          const parent = [...stack].reverse().find((open) => open.thread === thread) ?? null;
          sequence++;
          scope = {
            name: name!,
            path: parent === null ? [name!] : [...parent.path, name!],
            scopeId: `${sessionId}:${rank}:${sequence}`,
            parent: parent?.scopeId ?? null,
            thread,
          };
          stack.push(scope);
        } else {
          const at = stack.map((open) => open.thread).lastIndexOf(thread);
          scope = stack.splice(at, 1)[0]!;
          sequence++;
        }
        const counters = pick(["boundary_read", "boundary_read", "last_sample", null] as const);
        push(action === "enter" ? "phase_enter" : "phase_exit", {
          context: `Phase ${action === "enter" ? "entered" : "exited"}: ${scope.path.join(" / ")}`,
          device_id: rank % 3 === 1 && rand() < 0.3 ? 1 : (identity.device_id ?? 0),
          metadata: {
            ...(counters === null ? {} : { phase_counters: counters }),
            phase_scope: {
              action,
              name: scope.name,
              path: scope.path,
              depth: scope.path.length,
              scope_id: scope.scopeId,
              parent_scope_id: scope.parent,
              thread_id: thread,
              thread_name: thread === 1 ? "main" : "loader",
              sequence,
            },
          },
        });
        now += MS;
      };
      const sample = (): void => {
        push(pick(SAMPLE_SPELLINGS), {
          device_id: rank % 3 === 1 && rand() < 0.2 ? 1 : (identity.device_id ?? 0),
          device_total_bytes: rand() < 0.1 ? null : total,
          // Rank 1 samples mostly on another host: the earliest record names the process.
          ...(rank === 1 && rand() < 0.8 ? { host: "node-0b" } : {}),
          metadata: rand() < 0.1 ? { origin_thread_id: 2 } : {},
        });
        now += BigInt(1 + Math.floor(rand() * 3)) * MS;
      };

      push("start", {
        metadata: {
          memory_capabilities: { device_used: true, allocator: true },
          phase_scope: "dropped",
          sampling: "10ms",
        },
      });
      now += MS;
      for (let step = 0; step < steps; step++) {
        boundary("enter", 1, "train");
        sample();
        boundary("enter", 1, "forward");
        allocated += 4 * MiB;
        if (rank % 2 === 0) gap += 48 * MiB; // a hidden-memory drift
        if (rank === options.ranks - 1 && step === steps >> 1) reserved += 512 * MiB; // a spike
        sample();
        sample();
        if (step % 4 === 1) boundary("enter", 2, "prefetch");
        boundary("exit", 1);
        if (step % 4 === 1) boundary("exit", 2);
        sample();
        if (rand() < 0.25) {
          const kind = pick(["warning", "critical", "error", "oom"] as const);
          const metadata: JsonObject =
            kind === "oom"
              ? { oom_reason: "CUDA out of memory", requested_bytes: 2 ** 60 }
              : rand() < 0.5
                ? (parseJson(
                    '{"ratio": 1.0, "__proto__": {"x": 1}, "origin_thread_id": 2.0, "level": [0.5, 2.0]}',
                  ) as JsonObject)
                : { ratio: 0.91, origin_thread_id: 2, origin_phase_scope_id: `${sessionId}:${rank}:1` };
          push(kind === "oom" ? "error" : kind, {
            context: rand() < 0.8 ? `pressure at step ${step} ${"x".repeat(step * 8)}` : null,
            metadata,
          });
          now += MS;
        }
        if (step === 3 || step === 7) {
          push(step === 3 ? "collector_degraded" : "collector_recovered", {
            collector: "stormlog.nvml",
            context: step === 3 ? "NVML read failed" : null,
            metadata: { collector_last_error: "timeout", collector_health_status: "degraded", attempts: 3.0 },
          });
          now += MS;
        }
        if (step === 5 && rank === 0 && options.layout === "shared") identity.job_id = "late-job";
        boundary("exit", 1);
        sample();
      }
      // A phase left open: it ends at the rank's last event.
      boundary("enter", 1, "eval");
      sample();
      push("cleanup", { metadata: {} });
      now += MS;
      push("stop", { context: "done" });
    }
  }
  return events;
}
