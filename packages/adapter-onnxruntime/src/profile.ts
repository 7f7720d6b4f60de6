import { readdirSync, statSync } from "node:fs";
import { readFile, unlink } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import type { JsonObject, MemoryReading, PhaseHost } from "@stormlog/core";
import { OnnxProfileError } from "./errors.js";
import { sessionInstrumentation, sessionPhaseName } from "./session.js";
import type { OrtSessionLike } from "./types.js";

/**
 * One node execution of an onnxruntime profile (a `cat: "Node"` event named `<node>_kernel_time`).
 * Sizes come from the event's `args`, which onnxruntime writes as decimal strings. The `mem*`
 * fields are the arena statistics onnxruntime records after the node ran (present in the CPU
 * runtime of onnxruntime-node 1.30; older builds write only the three sizes).
 */
export interface OnnxNodeExecution {
  /** The node name (the event name without `_kernel_time`). */
  readonly node: string;
  readonly opName: string | undefined;
  readonly provider: string | undefined;
  /** Microseconds since the profiler started (session creation). */
  readonly tsUs: number;
  readonly durUs: number;
  /** Index of the `model_run` that contains it, when any. */
  readonly runIndex: number | undefined;
  /** `activation_size`: bytes of the node's non-initializer inputs. */
  readonly activationSize: number | undefined;
  /** `parameter_size`: bytes of the node's initializer inputs (weights). */
  readonly parameterSize: number | undefined;
  /** `output_size`: bytes of the node's outputs. */
  readonly outputSize: number | undefined;
  /** `mem_bytes_in_use`: bytes the arena has handed out. */
  readonly memBytesInUse: number | undefined;
  /** `mem_bytes_requested_in_use`: bytes callers asked for (in use without the arena's rounding). */
  readonly memBytesRequestedInUse: number | undefined;
  /** `mem_in_use_peak`: the arena's peak in-use bytes so far. */
  readonly memInUsePeak: number | undefined;
  /** `mem_arena_held`: bytes the arena holds from the system (reserved). */
  readonly memArenaHeld: number | undefined;
  readonly memInUseDelta: number | undefined;
  readonly memRequestedInUseDelta: number | undefined;
  readonly memArenaHeldDelta: number | undefined;
}

/** One `model_run` of the profile. */
export interface OnnxRunSummary {
  readonly index: number;
  readonly tsUs: number;
  readonly durUs: number;
  readonly nodes: number;
  /** Highest `mem_in_use_peak` of its nodes. */
  readonly inUsePeakBytes: number | undefined;
  /** `mem_arena_held` after its last node. */
  readonly arenaHeldBytes: number | undefined;
  /** Sum of its nodes' `output_size`. */
  readonly outputBytes: number;
}

/** An onnxruntime profile, reduced to what matters for memory. */
export interface OnnxProfile {
  readonly pid: number | undefined;
  /** `model_loading_uri` / `model_loading_array` duration. */
  readonly modelLoadUs: number | undefined;
  readonly sessionInitUs: number | undefined;
  readonly runs: readonly OnnxRunSummary[];
  readonly nodes: readonly OnnxNodeExecution[];
  /** Whether any node carried the `mem_*` arena fields. */
  readonly hasArenaStats: boolean;
}

/** One reading derived from a node's arena statistics. */
export interface OnnxProfileReading {
  readonly tsUs: number;
  /** `anchorNs + tsUs * 1000` when an anchor was given. */
  readonly timestampNs: bigint | undefined;
  readonly provider: string | undefined;
  /** `allocator_allocated_bytes` = `mem_bytes_in_use`, `allocator_reserved_bytes` = `mem_arena_held`. */
  readonly reading: MemoryReading;
  readonly metadata: JsonObject;
}

interface TraceEvent {
  cat?: unknown;
  name?: unknown;
  pid?: unknown;
  ts?: unknown;
  dur?: unknown;
  args?: unknown;
}

const KERNEL_SUFFIX = "_kernel_time";

/**
 * Parses onnxruntime's profile (Chrome trace JSON: an array of events, or `{ traceEvents }`).
 * Throws {@link OnnxProfileError} for anything else.
 */
export function parseOnnxProfile(input: string | unknown): OnnxProfile {
  let value: unknown = input;
  if (typeof input === "string") {
    try {
      value = JSON.parse(input);
    } catch (error) {
      throw new OnnxProfileError(
        `the onnxruntime profile is not JSON (${(error as Error).message}); pass the file endProfiling() wrote`,
        { cause: error },
      );
    }
  }
  const events = Array.isArray(value)
    ? value
    : typeof value === "object" &&
        value !== null &&
        Array.isArray((value as { traceEvents?: unknown }).traceEvents)
      ? ((value as { traceEvents: unknown[] }).traceEvents as unknown[])
      : undefined;
  if (!events) {
    throw new OnnxProfileError("the onnxruntime profile is not a Chrome trace (expected an array of events)");
  }

  let pid: number | undefined;
  let modelLoadUs: number | undefined;
  let sessionInitUs: number | undefined;
  const runSpans: { tsUs: number; durUs: number }[] = [];
  const rawNodes: { event: TraceEvent; args: Record<string, unknown> }[] = [];
  for (const raw of events) {
    if (typeof raw !== "object" || raw === null) continue;
    const event = raw as TraceEvent;
    if (pid === undefined && typeof event.pid === "number") pid = event.pid;
    const name = typeof event.name === "string" ? event.name : "";
    if (event.cat === "Session") {
      if (name === "model_run") runSpans.push({ tsUs: num(event.ts) ?? 0, durUs: num(event.dur) ?? 0 });
      else if (name.startsWith("model_loading")) modelLoadUs = num(event.dur);
      else if (name === "session_initialization") sessionInitUs = num(event.dur);
    } else if (event.cat === "Node" && name.endsWith(KERNEL_SUFFIX)) {
      const args =
        typeof event.args === "object" && event.args !== null ? (event.args as Record<string, unknown>) : {};
      rawNodes.push({ event, args });
    }
  }
  runSpans.sort((a, b) => a.tsUs - b.tsUs);

  const nodes: OnnxNodeExecution[] = rawNodes
    .map(({ event, args }) => {
      const tsUs = num(event.ts) ?? 0;
      const runIndex = runSpans.findIndex((run) => tsUs >= run.tsUs && tsUs <= run.tsUs + run.durUs);
      return {
        node: String(event.name).slice(0, -KERNEL_SUFFIX.length),
        opName: typeof args.op_name === "string" ? args.op_name : undefined,
        provider: typeof args.provider === "string" ? args.provider : undefined,
        tsUs,
        durUs: num(event.dur) ?? 0,
        runIndex: runIndex >= 0 ? runIndex : undefined,
        activationSize: num(args.activation_size),
        parameterSize: num(args.parameter_size),
        outputSize: num(args.output_size),
        memBytesInUse: num(args.mem_bytes_in_use),
        memBytesRequestedInUse: num(args.mem_bytes_requested_in_use),
        memInUsePeak: num(args.mem_in_use_peak),
        memArenaHeld: num(args.mem_arena_held),
        memInUseDelta: num(args.mem_in_use_delta, true),
        memRequestedInUseDelta: num(args.mem_requested_in_use_delta, true),
        memArenaHeldDelta: num(args.mem_arena_held_delta, true),
      };
    })
    .sort((a, b) => a.tsUs - b.tsUs);

  const runs = runSpans.map((span, index): OnnxRunSummary => {
    const own = nodes.filter((node) => node.runIndex === index);
    let peak: number | undefined;
    let held: number | undefined;
    let outputBytes = 0;
    for (const node of own) {
      if (node.memInUsePeak !== undefined) peak = Math.max(peak ?? 0, node.memInUsePeak);
      if (node.memArenaHeld !== undefined) held = node.memArenaHeld;
      outputBytes += node.outputSize ?? 0;
    }
    return {
      index,
      tsUs: span.tsUs,
      durUs: span.durUs,
      nodes: own.length,
      inUsePeakBytes: peak,
      arenaHeldBytes: held,
      outputBytes,
    };
  });

  return {
    pid,
    modelLoadUs,
    sessionInitUs,
    runs,
    nodes,
    hasArenaStats: nodes.some((node) => node.memArenaHeld !== undefined || node.memBytesInUse !== undefined),
  };
}

/** Reads and parses a profile file. */
export async function readOnnxProfile(path: string): Promise<OnnxProfile> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new OnnxProfileError(`cannot read the onnxruntime profile ${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  return parseOnnxProfile(text);
}

/**
 * Allocated/reserved readings from the nodes' arena statistics, in time order: allocated is
 * `mem_bytes_in_use`, reserved is `mem_arena_held`. Empty when the build writes no arena fields.
 * `anchorNs` (the session's creation time) turns profile microseconds into wall-clock nanoseconds.
 */
export function profileReadings(
  profile: OnnxProfile,
  options: { anchorNs?: bigint } = {},
): OnnxProfileReading[] {
  const readings: OnnxProfileReading[] = [];
  for (const node of profile.nodes) {
    if (node.memBytesInUse === undefined && node.memArenaHeld === undefined) continue;
    const reading: MemoryReading = {};
    if (node.memBytesInUse !== undefined) reading.allocator_allocated_bytes = node.memBytesInUse;
    if (node.memArenaHeld !== undefined) reading.allocator_reserved_bytes = node.memArenaHeld;
    const metadata: JsonObject = { onnx_node: node.node };
    if (node.opName !== undefined) metadata.onnx_op = node.opName;
    if (node.provider !== undefined) metadata.onnx_provider = node.provider;
    if (node.runIndex !== undefined) metadata.onnx_profile_run = node.runIndex;
    if (node.memInUsePeak !== undefined) metadata.onnx_in_use_peak_bytes = node.memInUsePeak;
    if (node.memBytesRequestedInUse !== undefined)
      metadata.onnx_requested_in_use_bytes = node.memBytesRequestedInUse;
    readings.push({
      tsUs: node.tsUs,
      timestampNs:
        options.anchorNs === undefined ? undefined : options.anchorNs + BigInt(Math.round(node.tsUs * 1000)),
      provider: node.provider,
      reading,
      metadata,
    });
  }
  return readings;
}

/**
 * A summary for phase metadata: runs, arena held and peak in use, arena growth, and the nodes with
 * the largest outputs (the activations that set the peak).
 */
export function profileSummaryMetadata(
  profile: OnnxProfile,
  options: { topNodes?: number } = {},
): JsonObject {
  const top = options.topNodes ?? 10;
  let heldMax: number | undefined;
  let heldLast: number | undefined;
  let peak: number | undefined;
  let growth = 0;
  for (const node of profile.nodes) {
    if (node.memArenaHeld !== undefined) {
      heldMax = Math.max(heldMax ?? 0, node.memArenaHeld);
      heldLast = node.memArenaHeld;
    }
    if (node.memInUsePeak !== undefined) peak = Math.max(peak ?? 0, node.memInUsePeak);
    growth += node.memArenaHeldDelta ?? 0;
  }
  const largest = [...profile.nodes]
    .sort((a, b) => (b.outputSize ?? 0) - (a.outputSize ?? 0))
    .filter((node, index, all) => all.findIndex((other) => other.node === node.node) === index)
    .slice(0, top)
    .map((node) => {
      const entry: JsonObject = { node: node.node, output_size: node.outputSize ?? null };
      if (node.opName !== undefined) entry.op = node.opName;
      if (node.provider !== undefined) entry.provider = node.provider;
      if (node.activationSize !== undefined) entry.activation_size = node.activationSize;
      if (node.parameterSize !== undefined) entry.parameter_size = node.parameterSize;
      return entry;
    });
  return {
    onnx_profile_runs: profile.runs.length,
    onnx_profile_node_executions: profile.nodes.length,
    onnx_profile_arena_stats: profile.hasArenaStats,
    onnx_arena_held_bytes: heldLast ?? null,
    onnx_arena_held_max_bytes: heldMax ?? null,
    onnx_arena_growth_bytes: profile.hasArenaStats ? growth : null,
    onnx_in_use_peak_bytes: peak ?? null,
    onnx_model_load_us: profile.modelLoadUs ?? null,
    onnx_session_init_us: profile.sessionInitUs ?? null,
    onnx_largest_outputs: largest,
  };
}

/** Options of {@link ingestSessionProfile}. */
export interface IngestProfileOptions {
  /** The session's name in the phase path. Default: the name it was instrumented with. */
  readonly name?: string;
  /** `profileFilePrefix` of the session. Default: the one it was created with, else onnxruntime's `onnxruntime_profile_`. */
  readonly profileFilePrefix?: string;
  /** Ignore profile files older than this (ms since the epoch). Default: the session's creation, else none. */
  readonly sinceMs?: number;
  /** Delete the file once read. Default false. */
  readonly deleteFile?: boolean;
}

/** What {@link ingestSessionProfile} found. */
export interface IngestedProfile {
  readonly path: string;
  readonly profile: OnnxProfile;
  readonly readings: OnnxProfileReading[];
  readonly metadata: JsonObject;
}

/**
 * Ends profiling on a session created with `enableProfiling: true`, finds the file onnxruntime
 * wrote (the JS API does not return its path), parses it and records a zero-length phase
 * `onnx:<name> / profile` whose attributes are {@link profileSummaryMetadata}.
 *
 * @example
 * const session = await createInstrumentedSession(ort, model, { enableProfiling: true, profileFilePrefix: "/tmp/enc" }, tracker, { name: "enc" });
 * await session.run(feeds);
 * const { readings, metadata } = await ingestSessionProfile(session, tracker);
 */
export async function ingestSessionProfile(
  session: OrtSessionLike,
  host: PhaseHost,
  options: IngestProfileOptions = {},
): Promise<IngestedProfile> {
  const instrumentation = sessionInstrumentation(session);
  const name = options.name ?? instrumentation?.name;
  if (name === undefined) {
    throw new OnnxProfileError("name the session: pass { name } or a session from instrumentSession()");
  }
  const prefix =
    options.profileFilePrefix ?? instrumentation?.options?.profileFilePrefix ?? DEFAULT_PROFILE_FILE_PREFIX;
  const createdMs =
    instrumentation?.createdAtNs === undefined ? undefined : Number(instrumentation.createdAtNs / 1_000_000n);
  // Whole-second file names and coarse mtimes: allow a second of slack before creation.
  const sinceMs = options.sinceMs ?? (createdMs === undefined ? undefined : createdMs - 1000);
  if (typeof session.endProfiling !== "function") {
    throw new OnnxProfileError("this session has no endProfiling(): is it an onnxruntime InferenceSession?");
  }
  session.endProfiling();
  const path = findProfileFile(prefix, sinceMs);
  if (path === undefined) {
    throw new OnnxProfileError(
      `no onnxruntime profile file '${prefix}_<date>.json' found; create the session with enableProfiling: true`,
    );
  }
  const profile = await readOnnxProfile(path);
  if (options.deleteFile === true) await unlink(path).catch(() => undefined);
  const metadata: JsonObject = {
    onnx_session: name,
    onnx_profile_file: path,
    ...profileSummaryMetadata(profile),
  };
  host.phase(sessionPhaseName(name), () => host.phase("profile", () => undefined, { metadata }), {
    metadata: { onnx_session: name },
  });
  const readings = profileReadings(
    profile,
    instrumentation?.createdAtNs === undefined ? {} : { anchorNs: instrumentation.createdAtNs },
  );
  return { path, profile, readings, metadata };
}

/** onnxruntime's default `profileFilePrefix`. */
export const DEFAULT_PROFILE_FILE_PREFIX = "onnxruntime_profile_";

/**
 * The newest `<prefix>_<YYYY-MM-DD_hh-mm-ss>.json` file (onnxruntime's naming), optionally no
 * older than `sinceMs`; undefined when there is none.
 */
export function findProfileFile(prefix: string, sinceMs?: number): string | undefined {
  const directory = dirname(resolve(prefix));
  const base = basename(prefix);
  const pattern = new RegExp(
    `^${escapeRegExp(base)}_\\d{4}-\\d{2}-\\d{2}_\\d{2}-\\d{2}-\\d{2}(?:_\\d+)?\\.json$`,
  );
  let entries: string[];
  try {
    entries = readdirSync(directory);
  } catch {
    return undefined;
  }
  let best: { path: string; mtimeMs: number } | undefined;
  for (const entry of entries) {
    if (!pattern.test(entry)) continue;
    const path = join(directory, entry);
    let mtimeMs: number;
    try {
      mtimeMs = statSync(path).mtimeMs;
    } catch {
      continue;
    }
    if (sinceMs !== undefined && mtimeMs < sinceMs) continue;
    if (!best || mtimeMs > best.mtimeMs || (mtimeMs === best.mtimeMs && path > best.path))
      best = { path, mtimeMs };
  }
  return best?.path;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** A non-negative integer from a number or a decimal string (onnxruntime writes strings); deltas may be negative. */
function num(value: unknown, signed = false): number | undefined {
  const n =
    typeof value === "number"
      ? value
      : typeof value === "string" && value.trim() !== ""
        ? Number(value)
        : Number.NaN;
  if (!Number.isSafeInteger(n)) return undefined;
  if (!signed && n < 0) return undefined;
  return n;
}
