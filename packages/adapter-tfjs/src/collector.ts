import {
  COLLECTOR_SPECIFICATION_VERSION,
  type CollectorAvailability,
  type JsonObject,
  type MemoryCapabilities,
  type MemoryCollector,
  type MemoryReading,
  noCapabilities,
  type PhaseContextLike,
  type SampleResult,
} from "@stormlog/core";
import { sameStrings } from "@stormlog/core/internal";
import { type BirthPhaseSubscription, subscribeBirthPhases } from "./attribution.js";
import type { TfEngine, TfMemoryInfo, TfNamespace } from "./types.js";

/** The telemetry `collector` of TensorFlow.js readings. */
export const TFJS_COLLECTOR_NAME = "stormlog.tfjs_tracker";

/** Options of {@link tfjsCollector}. */
export interface TfjsCollectorOptions {
  /** Telemetry `collector`. Default `stormlog.tfjs_tracker`. */
  readonly name?: string;
  /**
   * Telemetry `device_id`. Default: 0 for GPU backends (webgl, webgpu, and `tensorflow` when
   * tfjs-node-gpu runs on a GPU), -1 for host memory (cpu, wasm, `tensorflow` on the CPU). Use the
   * same id as the NVML collector of that GPU so the tracker merges both into one record.
   */
  readonly deviceId?: number;
  /**
   * Birth-phase attribution (default true): the phase path each tensor was created in is kept until
   * it is disposed, and every `sample()` reports live tensors and bytes per birth phase
   * (`tfjs_live_by_phase`). It wraps `tf.engine()`'s `trackTensor`/`disposeTensor` (tens of
   * nanoseconds per tensor) and never touches phase boundaries. False leaves the engine alone.
   */
  readonly attribution?: boolean;
}

/**
 * A collector whose `sample()` and `readSync()` read `tf.memory()` synchronously; `readSync()`
 * (phase boundaries) carries the counters and tensor counts, without the backend notes, and on the
 * cpu and `tensorflow` backends reads the same counts from `tf.engine().state`.
 */
export interface TfjsCollector extends MemoryCollector {
  sample(): SampleResult;
  readSync(): SampleResult;
  /** The backend the collector was created on (capabilities describe it). */
  readonly backendName: string;
  /** Whether birth-phase attribution runs (asked for, and the engine allows it). */
  readonly attribution: boolean;
  /** Tensors created from now on are attributed to `context`'s current phase (the tracker calls it). */
  bindPhases(context: PhaseContextLike): void;
  /**
   * Allocated bytes at their highest since the previous call, where above both that call's and
   * now's (a tensor made and disposed of between two readings), else null. Needs birth-phase
   * attribution, whose hook on `trackTensor` follows the byte count: null without it.
   */
  takeHighWater(): MemoryReading | null;
  /** Stops reading; the engine's last collector puts its wrapped methods back. Idempotent. */
  close(): void;
}

type ReservedReader = (tf: TfNamespace, info: TfMemoryInfo) => number | undefined;

interface ReservedSource {
  readonly read: ReservedReader;
  readonly description: string;
}

/**
 * Backend-held memory, where the backend exposes it. Other backends (cpu, `tensorflow`) hold
 * memory the framework does not report, so reserved is declared unsupported there.
 */
const RESERVED_SOURCES: Readonly<Record<string, ReservedSource>> = {
  // The wasm heap grows with the largest live set and never shrinks.
  wasm: { read: (tf) => wasmHeapBytes(tf.backend()), description: "wasm_heap" },
  webgl: { read: (_tf, info) => info.numBytesInGPUAllocated, description: "webgl_textures" },
  webgpu: { read: (_tf, info) => info.numBytesAllocatedInGPU, description: "webgpu_buffers" },
};

/**
 * A collector over an injected `tf` namespace that works on every backend: allocated bytes are
 * `tf.memory().numBytes`; tensor and data-buffer counts and the `unreliable` flag with its reasons
 * go to metadata; reserved is the wasm heap, WebGL's allocated textures or WebGPU's allocated
 * buffers, and is declared unsupported on cpu and `tensorflow` (tfjs-node, tfjs-node-gpu).
 * Create it after `await tf.ready()` so it sees the backend that will run.
 *
 * @example
 * import * as tf from "@tensorflow/tfjs";
 * await tf.ready();
 * const collector = tfjsCollector(tf);
 * collector.readSync(); // { kind: "full", reading: { allocator_allocated_bytes: 0 }, metadata: {...} }
 */
export function tfjsCollector(tf: TfNamespace, options: TfjsCollectorOptions = {}): TfjsCollector {
  const name = options.name ?? TFJS_COLLECTOR_NAME;
  const backendName = currentBackend(tf) ?? "unknown";
  const reservedSource = RESERVED_SOURCES[backendName];
  const capabilities: MemoryCapabilities = {
    ...noCapabilities(
      `tfjs-${backendName}`,
      name,
      reservedSource ? `tf.memory+${reservedSource.description}` : "tf.memory",
    ),
    supports_allocator_allocated: true,
    supports_allocator_reserved: reservedSource !== undefined,
  };
  const deviceId = options.deviceId ?? defaultDeviceId(tf, backendName);
  let closed = false;
  // Created with the collector, so tensors made before the tracker starts (the model) count, under "".
  const births: BirthPhaseSubscription | string | undefined =
    options.attribution === false ? undefined : subscribeBirthPhases(engineOrUndefined(tf));
  // Asked for explicitly but impossible here: samples say why. By default, silently off.
  const attributionError =
    typeof births === "string" && options.attribution === true
      ? `birth-phase attribution is off: ${births}`
      : undefined;
  const attribution = typeof births === "object" ? births : undefined;

  // The last reasons given, handed out again while tfjs gives the same ones: the sink's encoder sends
  // a new object to its worker, an unchanged one it names by reference.
  let lastReasons: string[] = [];

  /** `detail` false: the boundary read (`readSync`), with the tensor counts only. */
  const read = (detail: boolean): SampleResult => {
    if (closed) return { kind: "failure", error: "the tfjs collector was closed" };
    let info: TfMemoryInfo;
    let backend: string;
    try {
      info = tf.memory();
      backend = tf.getBackend();
    } catch (error) {
      return {
        kind: "failure",
        error: `tf.memory() failed (is the backend initialised? await tf.ready() first): ${describe(error)}`,
        cause: error,
      };
    }
    // Phase boundaries need the counts (tensors per phase), not the backend's notes: every phase
    // writes two records, and the notes would double their size.
    const metadata: JsonObject = detail
      ? {
          tfjs_backend: backend,
          tfjs_num_tensors: info.numTensors,
          tfjs_num_data_buffers: info.numDataBuffers,
          tfjs_unreliable: info.unreliable === true,
        }
      : { tfjs_num_tensors: info.numTensors, tfjs_num_data_buffers: info.numDataBuffers };
    if (detail && info.unreliable === true && info.reasons !== undefined && info.reasons.length > 0) {
      if (!sameStrings(lastReasons, info.reasons)) lastReasons = [...info.reasons];
      metadata.tfjs_unreliable_reasons = lastReasons;
    }
    if (info.numBytesInGPU !== undefined) metadata.tfjs_gpu_bytes_in_use = info.numBytesInGPU;
    if (detail && info.numBytesInGPUFree !== undefined) metadata.tfjs_gpu_bytes_free = info.numBytesInGPUFree;
    if (detail) addAttribution(metadata);

    const allocated = info.numBytes;
    if (!isCount(allocated)) {
      return { kind: "failure", error: `tf.memory().numBytes is not a byte count: ${String(allocated)}` };
    }
    const reading: MemoryReading = { allocator_allocated_bytes: allocated };
    if (!reservedSource) return { kind: "full", reading, metadata };

    // After tf.setBackend() the declared source may no longer apply: read the new backend's, if any.
    const source = backend === backendName ? reservedSource : RESERVED_SOURCES[backend];
    let reserved: number | undefined;
    let reason = `backend changed from ${backendName} to ${backend}, which does not expose reserved memory`;
    if (source) {
      try {
        reserved = source.read(tf, info);
        reason =
          reserved === undefined
            ? `${source.description} is not exposed by this ${backend} backend`
            : `${source.description} is not a byte count: ${String(reserved)}`;
      } catch (error) {
        reason = `could not read ${source.description}: ${describe(error)}`;
      }
    }
    if (isCount(reserved)) {
      reading.allocator_reserved_bytes = reserved;
      return { kind: "full", reading, metadata };
    }
    return { kind: "partial", reading, missing: ["allocator_reserved_bytes"], reason, metadata };
  };

  // A phase boundary inside a training step runs with caches full of tensor data, where
  // `tf.memory()` (a backend call and two objects) costs ~5x reading the engine's counts.
  const engine = ENGINE_COUNTED_BACKENDS.has(backendName) ? engineOf(tf) : undefined;
  const readBoundary = (): SampleResult => {
    if (engine !== undefined && !closed && engine.backendName === backendName) {
      const state = engine.state;
      if (isCount(state.numBytes)) {
        return {
          kind: "full",
          reading: { allocator_allocated_bytes: state.numBytes },
          metadata: { tfjs_num_tensors: state.numTensors, tfjs_num_data_buffers: state.numDataBuffers },
        };
      }
    }
    return read(false);
  };

  /** Sample metadata only: grouping every live tensor is too much for a phase boundary. */
  const addAttribution = (metadata: JsonObject): void => {
    if (attribution === undefined) {
      if (attributionError !== undefined) metadata.tfjs_attribution_error = attributionError;
      return;
    }
    const error = attribution.error;
    if (error !== undefined) {
      metadata.tfjs_attribution_error = error;
      return;
    }
    try {
      metadata.tfjs_live_by_phase = attribution.live();
      metadata.tfjs_attribution = "birth_phase";
    } catch (caught) {
      metadata.tfjs_attribution_error = `could not group live tensors by birth phase: ${describe(caught)}`;
    }
  };

  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name,
    deviceId,
    capabilities,
    backendName,
    attribution: attribution !== undefined,
    bindPhases(context: PhaseContextLike): void {
      if (!closed) attribution?.bind(context);
    },
    availability(): CollectorAvailability {
      if (closed) return { available: false, reason: "the tfjs collector was closed" };
      try {
        tf.memory();
        return { available: true };
      } catch (error) {
        return { available: false, reason: `tf.memory() failed: ${describe(error)}` };
      }
    },
    sample: () => read(true),
    readSync: readBoundary,
    takeHighWater(): MemoryReading | null {
      if (closed || attribution === undefined) return null;
      const high = attribution.takeHighWater();
      return high === null ? null : { allocator_allocated_bytes: high };
    },
    close(): void {
      closed = true;
      // The last collector of the engine puts its trackTensor/disposeTensor back.
      attribution?.release();
    },
  };
}

/**
 * Backends whose `memory()` adds nothing but notes to the engine's counts (no reserved or GPU
 * figures): at phase boundaries the collector reads `tf.engine().state` instead.
 */
const ENGINE_COUNTED_BACKENDS: ReadonlySet<string> = new Set(["cpu", "tensorflow"]);

/** `tf.engine()`, or undefined when the build hides it or it throws. */
function engineOrUndefined(tf: TfNamespace): TfEngine | undefined {
  try {
    return tf.engine?.();
  } catch {
    return undefined;
  }
}

/** `tf.engine()` when it has the counts `tf.memory()` copies, else undefined. */
function engineOf(tf: TfNamespace): TfEngine | undefined {
  try {
    const engine = tf.engine?.();
    const state = engine?.state;
    return state !== undefined && typeof state.numBytes === "number" && typeof state.numTensors === "number"
      ? engine
      : undefined;
  } catch {
    return undefined;
  }
}

/** Bytes of the wasm backend's heap (`backend.wasm.HEAPU8.buffer`), updated by Emscripten on growth. */
export function wasmHeapBytes(backend: unknown): number | undefined {
  const wasm = property(backend, "wasm");
  const heap = property(wasm, "HEAPU8");
  const buffer = property(heap, "buffer");
  const length = property(buffer, "byteLength");
  return typeof length === "number" ? length : undefined;
}

function defaultDeviceId(tf: TfNamespace, backendName: string): number {
  if (backendName === "webgl" || backendName === "webgpu") return 0;
  if (backendName === "tensorflow") {
    try {
      // tfjs-node's NodeJSKernelBackend says whether TensorFlow placed ops on a GPU.
      return property(tf.backend(), "isUsingGpuDevice") === true ? 0 : -1;
    } catch {
      return -1;
    }
  }
  return -1;
}

function currentBackend(tf: TfNamespace): string | undefined {
  try {
    const name = tf.getBackend();
    return typeof name === "string" && name.length > 0 ? name : undefined;
  } catch {
    return undefined;
  }
}

function property(value: unknown, key: string): unknown {
  return typeof value === "object" && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
