import { mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { arch, cpus, hostname, platform, release, totalmem } from "node:os";
import { join } from "node:path";
import {
  InvalidConfigError,
  type JsonObject,
  type JsonValue,
  type SessionSummary,
  stringifyJson,
  type TelemetryEvent,
} from "@stormlog/core";
import { sessionSummaryToJson } from "@stormlog/core/internal";

/** The reference's message patterns, in its order (`_OOM_MESSAGE_PATTERNS`). */
export const OOM_MESSAGE_PATTERNS = [
  "out of memory",
  "cuda out of memory",
  "hip out of memory",
  "resource exhausted",
  "failed to allocate",
  "allocation failed",
  "memoryerror",
  "std::bad_alloc",
] as const;

/** Whether an error is an out-of-memory condition, and the reference's reason string. */
export interface OOMClassification {
  readonly isOOM: boolean;
  /** `tensorflow.ResourceExhaustedError`, `message_pattern:<pattern>`, or null. */
  readonly reason: string | null;
}

function errorName(error: object): string {
  const constructorName = (error as { constructor?: { name?: unknown } }).constructor?.name;
  const name = (error as { name?: unknown }).name;
  return String(
    typeof constructorName === "string" && constructorName !== "Object" ? constructorName : (name ?? ""),
  );
}

function classifyOne(error: unknown): string | null {
  if (typeof error === "object" && error !== null) {
    const name = errorName(error).toLowerCase();
    const ownName = String((error as { name?: unknown }).name ?? "").toLowerCase();
    if (name.endsWith("resourceexhaustederror") || ownName.endsWith("resourceexhaustederror")) {
      return "tensorflow.ResourceExhaustedError";
    }
  }
  const message = (
    typeof error === "object" && error !== null && "message" in error
      ? String((error as { message: unknown }).message)
      : String(error)
  )
    .trim()
    .toLowerCase();
  for (const pattern of OOM_MESSAGE_PATTERNS)
    if (message.includes(pattern)) return `message_pattern:${pattern}`;
  return null;
}

/**
 * The reference's `classify_oom_exception`: an error whose class name ends in
 * `ResourceExhaustedError` (tfjs-node and TensorFlow), or whose message contains one of
 * `OOM_MESSAGE_PATTERNS` (onnxruntime's "Failed to allocate memory", V8's "Array buffer allocation
 * failed", CUDA's "out of memory"...). Unlike the reference it also looks through `error.cause`.
 */
export function classifyOOMError(error: unknown): OOMClassification {
  let current: unknown = error;
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth++) {
    const reason = classifyOne(current);
    if (reason !== null) return { isOOM: true, reason };
    current = typeof current === "object" ? (current as { cause?: unknown }).cause : undefined;
  }
  return { isOOM: false, reason: null };
}

/** Options of the OOM flight recorder (the reference's `oom_*` tracker arguments). */
export interface OOMFlightRecorderOptions {
  /** Default false, as the reference. */
  readonly enabled?: boolean;
  /** Where dump bundles go (default `oom_dumps`, relative to the working directory). */
  readonly dumpDir?: string;
  /** Records kept for a dump (default: the tracker's `maxEvents`). */
  readonly bufferSize?: number;
  /** Bundles kept, newest first (default 5; 0 keeps all). */
  readonly maxDumps?: number;
  /** Total size of the kept bundles in MiB (default 256; 0 means no limit). */
  readonly maxTotalMb?: number;
}

/** Resolved options. */
export interface ResolvedOOMOptions {
  readonly enabled: boolean;
  readonly dumpDir: string;
  readonly bufferSize: number;
  readonly maxDumps: number;
  readonly maxTotalMb: number;
}

/** Fills defaults and checks the options; throws `InvalidConfigError`. */
export function resolveOOMOptions(
  options: OOMFlightRecorderOptions | undefined,
  maxEvents: number,
): ResolvedOOMOptions {
  const given = options ?? {};
  const integer = (name: string, value: number | undefined, fallback: number, min: number) => {
    if (value === undefined) return fallback;
    if (!Number.isSafeInteger(value) || value < min) {
      throw new InvalidConfigError(`oom.${name}`, `expected an integer >= ${min}, got ${String(value)}`);
    }
    return value;
  };
  const bufferSize = integer("bufferSize", given.bufferSize, maxEvents, 1);
  return {
    enabled: given.enabled ?? false,
    dumpDir: given.dumpDir ?? "oom_dumps",
    bufferSize,
    maxDumps: integer("maxDumps", given.maxDumps, 5, 0),
    maxTotalMb: integer("maxTotalMb", given.maxTotalMb, 256, 0),
  };
}

/** What a dump records about the failure. */
export interface OOMDumpRequest {
  readonly reason: string;
  readonly error: unknown;
  readonly context: string | null;
  readonly backend: string;
  readonly metadata: JsonObject;
  readonly session: SessionSummary | null;
}

/** The tracker payload the reference keeps in its ring buffer (`TrackingEvent`, legacy field names). */
export function legacyEventPayload(record: TelemetryEvent): JsonObject {
  const metadata = record.metadata;
  const backend = typeof metadata.backend === "string" ? metadata.backend : "unknown";
  return {
    timestamp: Number(record.timestamp_ns) / 1e9,
    event_type: record.event_type,
    session_id: record.session_id,
    memory_allocated: record.allocator_allocated_bytes,
    memory_reserved: record.allocator_reserved_bytes,
    memory_change: record.allocator_change_bytes,
    device_id: record.device_id,
    context: record.context,
    job_id: record.job_id,
    rank: record.rank,
    local_rank: record.local_rank,
    world_size: record.world_size,
    metadata: { ...metadata },
    active_memory: record.allocator_active_bytes,
    inactive_memory: record.allocator_inactive_bytes,
    device_used: record.device_used_bytes,
    device_free: record.device_free_bytes,
    device_total: record.device_total_bytes,
    backend,
  };
}

function utcStamp(date: Date, compact: boolean): string {
  const pad = (n: number) => String(n).padStart(2, "0");
  const day = `${date.getUTCFullYear()}${compact ? "" : "-"}${pad(date.getUTCMonth() + 1)}${compact ? "" : "-"}${pad(date.getUTCDate())}`;
  const time = `${pad(date.getUTCHours())}${compact ? "" : ":"}${pad(date.getUTCMinutes())}${compact ? "" : ":"}${pad(date.getUTCSeconds())}`;
  return `${day}T${time}Z`;
}

function describeError(error: unknown): { type: string; module: string; message: string } {
  if (typeof error === "object" && error !== null) {
    return {
      type: errorName(error) || "Error",
      module: "javascript",
      message: String((error as { message?: unknown }).message ?? error),
    };
  }
  return { type: typeof error, module: "javascript", message: String(error) };
}

function writeJson(path: string, value: JsonValue): void {
  writeFileSync(path, `${stringifyJson(value, { indent: 2 })}`, "utf8");
}

/**
 * The reference's OOM flight recorder's dump side: the tracker's recent records (its bounded ring,
 * `bufferSize` long) are dumped on an OOM as `oom_dump_<UTC>_<pid>_<backend>_<n>/` with `events.json` (legacy tracker payloads),
 * `metadata.json`, `environment.json` and `manifest.json`; then retention keeps the newest
 * `maxDumps` bundles and deletes the oldest until the total is within `maxTotalMb`. Writes are
 * synchronous: a dump must land before the process goes down.
 */
export class OOMFlightRecorder {
  readonly options: ResolvedOOMOptions;
  private sequence = 0;

  constructor(options: ResolvedOOMOptions) {
    this.options = options;
  }

  /**
   * Writes a bundle of `events` (the ring's records, oldest first) and applies retention. Returns the
   * bundle path. Throws on I/O errors.
   */
  dump(request: OOMDumpRequest, records: readonly TelemetryEvent[], now: Date = new Date()): string {
    const root = this.options.dumpDir;
    mkdirSync(root, { recursive: true });
    const safeBackend = request.backend.replace(/[^a-zA-Z0-9_-]+/g, "_") || "unknown";
    let bundle: string;
    for (;;) {
      this.sequence++;
      bundle = join(root, `oom_dump_${utcStamp(now, true)}_${process.pid}_${safeBackend}_${this.sequence}`);
      try {
        mkdirSync(bundle);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      }
    }
    const events = records.map(legacyEventPayload);
    const session = request.session === null ? null : sessionSummaryToJson(request.session);
    const described = describeError(request.error);
    writeJson(join(bundle, "events.json"), events);
    writeJson(join(bundle, "metadata.json"), {
      reason: request.reason,
      exception_type: described.type,
      exception_module: described.module,
      exception_message: described.message,
      context: request.context,
      backend: request.backend,
      captured_event_count: events.length,
      session_id: request.session?.session_id ?? null,
      session_status: request.session?.status ?? null,
      session,
      custom_metadata: request.metadata,
    });
    writeJson(join(bundle, "environment.json"), {
      pid: process.pid,
      cwd: process.cwd(),
      system: {
        platform: platform(),
        release: release(),
        arch: arch(),
        hostname: hostname(),
        node_version: process.version,
        cpu_count: cpus().length,
        total_memory_bytes: totalmem(),
      },
    });
    writeJson(join(bundle, "manifest.json"), {
      schema_version: 2,
      bundle_name: bundle.slice(root.length).replace(/^[\\/]+/, ""),
      created_at_utc: utcStamp(now, false),
      reason: request.reason,
      backend: request.backend,
      event_count: events.length,
      session_id: request.session?.session_id ?? null,
      session_status: request.session?.status ?? null,
      session,
      files: ["manifest.json", "events.json", "metadata.json", "environment.json"],
    });
    this.prune(root);
    return bundle;
  }

  /** Retention, oldest first by modification time, as the reference's `_prune_retention`. */
  prune(root: string): void {
    let bundles = listBundlesOldestFirst(root);
    const maxDumps = this.options.maxDumps;
    if (maxDumps > 0 && bundles.length > maxDumps) {
      for (const stale of bundles.slice(0, bundles.length - maxDumps))
        rmSync(stale.path, { recursive: true, force: true });
    }
    const maxBytes = this.options.maxTotalMb * 1024 * 1024;
    if (maxBytes <= 0) return;
    bundles = listBundlesOldestFirst(root);
    let total = bundles.reduce((sum, bundle) => sum + bundleSize(bundle.path), 0);
    while (bundles.length > 0 && total > maxBytes) {
      const oldest = bundles.shift() as { path: string };
      const size = bundleSize(oldest.path);
      rmSync(oldest.path, { recursive: true, force: true });
      total = Math.max(total - size, 0);
    }
  }
}

function listBundlesOldestFirst(root: string): { path: string; mtimeMs: number }[] {
  const bundles: { path: string; mtimeMs: number }[] = [];
  for (const entry of readdirSync(root, { withFileTypes: true })) {
    if (!entry.isDirectory() || !entry.name.startsWith("oom_dump_")) continue;
    const path = join(root, entry.name);
    try {
      bundles.push({ path, mtimeMs: statSync(path).mtimeMs });
    } catch {
      // Removed meanwhile.
    }
  }
  return bundles.sort((a, b) => a.mtimeMs - b.mtimeMs || bundleOrder(a.path) - bundleOrder(b.path));
}

function bundleSize(path: string): number {
  let total = 0;
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name);
      if (entry.isDirectory()) visit(full);
      else if (entry.isFile()) total += statSync(full).size;
    }
  };
  try {
    visit(path);
  } catch {
    // Removed meanwhile.
  }
  return total;
}

/** The trailing sequence number of a bundle name, to order bundles written within one clock tick. */
function bundleOrder(path: string): number {
  const match = /_(\d+)$/.exec(path);
  return match ? Number(match[1]) : 0;
}
