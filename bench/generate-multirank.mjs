#!/usr/bin/env node
// Writes a synthetic distributed job into a sink root, one sink directory per rank (the shared-root
// layout `rank-<rank>-<host>-<pid>`), with canonical v3 lines from core's encodeTelemetryRecord.
// Default: 64 ranks x 5000 samples (10 ms apart) plus nested phase records, start/stop, a few
// alerts and collector-health transitions: about 220 MB and 352k events. Known signals for checks:
// rank 17 spikes first (device used +2 GiB at ~30 s, the other ranks 0.5 s later), `train / forward`
// leaks 12 KiB and 3 tensors per occurrence on ranks divisible by 8, `train / optimizer` grows for 10
// steps and then plateaus (an arena warming up), and rank 5's hidden gap drifts upward.
//
//   node --import tsx bench/generate-multirank.mjs OUT_DIR [--ranks 64] [--samples 5000]
//        [--rollover-events 10000] [--seed 1] [--single-file]
//
// `--samples 23000` gives about 1 GB. Deterministic for a given seed. `--single-file` writes the
// same records, rank after rank, into one file OUT_DIR/job.jsonl instead (no manifests).
import { closeSync, mkdirSync, openSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";

const core = await import(new URL("../packages/core/src/index.ts", import.meta.url).href);
const { encodeTelemetryRecord, stringifyJson } = core;

const USAGE =
  "usage: node --import tsx bench/generate-multirank.mjs OUT_DIR [--ranks N] [--samples N] [--rollover-events N] [--seed N] [--single-file]";

function parseArgs(argv) {
  const opts = {
    out: undefined,
    ranks: 64,
    samples: 5000,
    rolloverEvents: 10000,
    seed: 1,
    quiet: false,
    singleFile: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const next = () => {
      const value = Number(argv[++i]);
      if (!Number.isSafeInteger(value) || value <= 0)
        throw new Error(`${arg} needs a positive integer\n${USAGE}`);
      return value;
    };
    if (arg === "--ranks") opts.ranks = next();
    else if (arg === "--samples") opts.samples = next();
    else if (arg === "--rollover-events") opts.rolloverEvents = next();
    else if (arg === "--seed") opts.seed = next();
    else if (arg === "--quiet") opts.quiet = true;
    else if (arg === "--single-file") opts.singleFile = true;
    else if (arg.startsWith("-")) throw new Error(`unknown option ${arg}\n${USAGE}`);
    else opts.out = arg;
  }
  if (opts.out === undefined) throw new Error(USAGE);
  return opts;
}

/** mulberry32: small, fast, deterministic. */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const TOTAL = 80 * GiB;
const BASE_NS = 1_760_000_000_000_000_000n;
const INTERVAL_NS = 10_000_000n;
const HOST_COUNT = 8;
const SPIKE_RANK = 17;

function healthMetadata(status, error) {
  const metadata = {
    collector_health_status: status,
    telemetry_partial: false,
    collector_partial_fields: [],
    collector_last_error: error,
    collector_consecutive_failures: status === "healthy" ? 0 : 1,
    collector_next_retry_epoch_s: null,
    backend: "tensorflow",
    sampling_source: "stormlog.tfjs",
    supports_device_free: true,
    supports_device_total: true,
  };
  return metadata;
}

/**
 * Writes one rank's sink directory, or with `single` (an open file) its records into that file;
 * returns [events, bytes].
 */
function writeRank(root, rank, opts, single = null) {
  const rand = random(opts.seed * 7919 + rank);
  const host = `node-${Math.floor(rank / HOST_COUNT)}`;
  const pid = 4000 + rank;
  const dir = join(root, `rank-${rank}-${host}-${pid}`);
  if (single === null) mkdirSync(dir, { recursive: true });
  const sessionId = `bench-session-${String(rank).padStart(3, "0")}`;
  const offsetNs = BigInt(Math.floor(rand() * 4_000_000)); // clock offset up to 4 ms
  const leaks = rank % 8 === 0;
  const samples = opts.samples;
  const steps = Math.max(1, Math.floor(samples / 60));
  const stepSamples = Math.floor(samples / steps);

  const segments = [];
  let fd = single ?? -1;
  let segment = null;
  let buffer = [];
  let bufferBytes = 0;
  let events = 0;
  let bytes = 0;
  const flush = () => {
    if (buffer.length === 0) return;
    writeSync(fd, buffer.join(""));
    buffer = [];
    bufferBytes = 0;
  };
  const emit = (record) => {
    if (single === null && (segment === null || segment.event_count >= opts.rolloverEvents)) {
      if (segment !== null) {
        flush();
        closeSync(fd);
        segment.closed = true;
      }
      const filename = `segment-${String(segments.length + 1).padStart(6, "0")}.jsonl`;
      fd = openSync(join(dir, filename), "w");
      segment = { filename, event_count: 0, size_bytes: 0, closed: false, session_id: sessionId };
      segments.push(segment);
    }
    const line = `${encodeTelemetryRecord(record)}\n`;
    buffer.push(line);
    bufferBytes += line.length;
    const size = Buffer.byteLength(line);
    if (segment !== null) {
      segment.event_count++;
      segment.size_bytes += size;
    }
    bytes += size;
    events++;
    if (bufferBytes > 1 << 20) flush();
  };

  let health = "healthy";
  let tensors = 120;
  let leaked = 0; // bytes kept by the leaking forward pass
  let leakedTensors = 0;
  let arena = 256 * MiB; // optimizer state arena, grows for 10 steps
  const base = 2 * GiB + rank * 3 * MiB;
  let activations = 0;
  let spike = 0;
  let gapDrift = 0;

  const state = () => {
    const allocated = base + arena + activations + leaked + spike;
    const reserved = Math.ceil((allocated * 1.08) / (2 * MiB)) * 2 * MiB;
    const gap = 300 * MiB + gapDrift + Math.floor(rand() * 4 * MiB);
    const used = reserved + gap;
    return { allocated, reserved, used };
  };
  const record = (ts, eventType, context, metadata, counters, change = 0) => ({
    schema_version: 3,
    session_id: sessionId,
    timestamp_ns: ts,
    event_type: eventType,
    collector: "stormlog.tfjs",
    sampling_interval_ms: 10,
    pid,
    host,
    job_id: "bench-job-64",
    rank,
    local_rank: rank % HOST_COUNT,
    world_size: opts.ranks,
    device_id: rank % HOST_COUNT,
    allocator_allocated_bytes: counters.allocated,
    allocator_reserved_bytes: counters.reserved,
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: change,
    device_used_bytes: counters.used,
    device_free_bytes: TOTAL - counters.used,
    device_total_bytes: TOTAL,
    context,
    metadata,
  });

  const startNs = BASE_NS + offsetNs;
  const zero = { allocated: 0, reserved: 0, used: 0 };
  emit(record(startNs, "start", "Tracking started.", healthMetadata("healthy", null), zero));

  let sequence = 0;
  const stack = [];
  const phaseEvent = (ts, action, name) => {
    sequence++;
    let scope;
    if (action === "enter") {
      const parent = stack[stack.length - 1] ?? null;
      scope = {
        name,
        path: parent ? [...parent.path, name] : [name],
        scope_id: `${sessionId}:${sequence}`,
        parent_scope_id: parent ? parent.scope_id : null,
      };
      stack.push(scope);
    } else {
      scope = stack.pop();
    }
    const path = scope.path;
    const metadata = {
      phase_scope: {
        action,
        name: scope.name,
        path,
        depth: path.length,
        scope_id: scope.scope_id,
        parent_scope_id: scope.parent_scope_id,
        thread_id: 1,
        thread_name: "main",
        sequence,
      },
      tfjs_num_tensors: tensors + leakedTensors,
    };
    const verb = action === "enter" ? "entered" : "exited";
    emit(
      record(
        ts,
        action === "enter" ? "phase_enter" : "phase_exit",
        `Phase ${verb}: ${path.join(" / ")}`,
        metadata,
        state(),
      ),
    );
  };

  const sampleTs = (i) => startNs + BigInt(i + 1) * INTERVAL_NS + BigInt(Math.floor(rand() * 200_000));
  let previousAllocated = 0;
  phaseEvent(startNs + 1000n, "enter", "train");
  for (let i = 0; i < samples; i++) {
    const step = Math.floor(i / stepSamples);
    const within = i - step * stepSamples;
    const ts = sampleTs(i);
    // Phase boundaries inside each step: forward [2, 22), backward [24, 48), optimizer [50, 56).
    if (step < steps) {
      if (within === 2) phaseEvent(ts - 5_000_000n, "enter", "forward");
      if (within === 22) {
        if (leaks) {
          leaked += 12 * 1024;
          leakedTensors += 3;
        }
        phaseEvent(ts - 5_000_000n, "exit", "forward");
      }
      if (within === 24) phaseEvent(ts - 5_000_000n, "enter", "backward");
      if (within === 48) phaseEvent(ts - 5_000_000n, "exit", "backward");
      if (within === 50) phaseEvent(ts - 5_000_000n, "enter", "optimizer");
      if (within === 56) {
        if (step < 10) arena += 64 * MiB;
        phaseEvent(ts - 5_000_000n, "exit", "optimizer");
      }
    }
    activations = within >= 2 && within < 36 ? (within - 1) * 8 * MiB : 0;
    tensors = 120 + (activations > 0 ? 40 : 0);
    // Rank 17 spikes at ~30 s, the others half a second later; it stays high for 2 s.
    const spikeAt = rank === SPIKE_RANK ? 3000 : 3050;
    spike = i >= spikeAt && i < spikeAt + 200 ? Math.min(i - spikeAt + 1, 8) * 256 * MiB : 0;
    if (rank === 5) gapDrift = i * MiB;
    if (rank === 3 && i === 1200) {
      health = "degraded";
      emit(
        record(
          ts - 1000n,
          "collector_degraded",
          "Collector degraded: NVML read failed.",
          healthMetadata(health, "NVML_ERROR_TIMEOUT"),
          state(),
        ),
      );
    }
    if (rank === 3 && i === 1260) {
      health = "healthy";
      emit(
        record(
          ts - 1000n,
          "collector_recovered",
          "Collector recovered.",
          healthMetadata(health, null),
          state(),
        ),
      );
    }
    const counters = state();
    if (spike > 0 && i === spikeAt + 7) {
      const percent = ((counters.used / TOTAL) * 100).toFixed(1);
      emit(
        record(
          ts - 500n,
          "warning",
          `WARNING: Memory usage at ${percent}%`,
          healthMetadata(health, null),
          counters,
        ),
      );
    }
    // Health keys ride on collector events only, to keep lines near the reference's size.
    const metadata = { tfjs_num_tensors: tensors + leakedTensors };
    emit(
      record(
        ts,
        "sample",
        "Collected telemetry sample.",
        metadata,
        counters,
        counters.allocated - previousAllocated,
      ),
    );
    previousAllocated = counters.allocated;
  }
  const endNs = sampleTs(samples) + INTERVAL_NS;
  phaseEvent(endNs - 1000n, "exit", "train");
  emit(record(endNs, "stop", "Tracking stopped.", healthMetadata(health, null), state()));
  flush();
  if (single !== null) return [events, bytes];
  closeSync(fd);
  segment.closed = true;
  bytes = 0;
  for (const s of segments) {
    s.size_bytes = statSync(join(dir, s.filename)).size;
    bytes += s.size_bytes;
  }
  const summary = {
    session_id: sessionId,
    status: "completed",
    started_at_ns: startNs,
    ended_at_ns: endNs,
    host,
    pid,
    job_id: "bench-job-64",
    rank,
    local_rank: rank % HOST_COUNT,
    world_size: opts.ranks,
    source: "stormlog.tracker",
  };
  const manifest = {
    schema_version: 2,
    format: "stormlog.append_only_telemetry_sink",
    sessions: [summary],
    segments,
  };
  writeFileSync(join(dir, "manifest.json"), `${stringifyJson(manifest, { indent: 2 })}\n`);
  return [events, bytes];
}

const opts = parseArgs(process.argv.slice(2));
rmSync(opts.out, { recursive: true, force: true });
mkdirSync(opts.out, { recursive: true });
let events = 0;
let bytes = 0;
const started = performance.now();
const single = opts.singleFile ? openSync(join(opts.out, "job.jsonl"), "w") : null;
for (let rank = 0; rank < opts.ranks; rank++) {
  const [e, b] = writeRank(opts.out, rank, opts, single);
  events += e;
  bytes += b;
}
if (single !== null) closeSync(single);
if (!opts.quiet) {
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(
    `${opts.out}: ${opts.ranks} ranks, ${events} events, ${(bytes / 1e6).toFixed(1)} MB in ${seconds} s`,
  );
}
