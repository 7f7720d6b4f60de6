import {
  InvalidConfigError,
  type JsonObject,
  type PhaseHost,
  type PhaseOptions,
  systemClock,
} from "@stormlog/core";
import type { OrtNamespace, OrtSessionLike, OrtSessionOptionsLike, OrtValueLike } from "./types.js";

/** Options of {@link instrumentSession}. */
export interface InstrumentSessionOptions {
  /** The session's name in phase paths: `onnx:<name> / run`. */
  readonly name: string;
  /** Record `process.memoryUsage.rss()` (~9 us) as an attribute of create and release. Default true. */
  readonly recordRss?: boolean;
  /** Wrap `run()` in phases (default true). False tracks only create/release. */
  readonly runPhases?: boolean;
  /**
   * Open the session's phases with `{ readings: true }` (default true): the tracker reads memory at
   * their enter and exit even from collectors it does not read at every boundary (the process
   * collector's RSS, about 2 us on Linux), so each run, create and release shows its own growth.
   */
  readonly readings?: boolean;
}

/** What the adapter knows about an instrumented session. */
export interface SessionInstrumentation {
  readonly name: string;
  /** The create/release cycle of this session (1 for the first session of this name on this host). */
  readonly cycle: number;
  /** `run()` calls so far. */
  readonly runs: number;
  /** Distinct input signatures seen, in first-seen order (growth often follows new shapes). */
  readonly signatures: readonly string[];
  readonly released: boolean;
  /** When the session was created, for aligning its profile (ns since the epoch; undefined if unknown). */
  readonly createdAtNs: bigint | undefined;
  /** The session options it was created with, when known. */
  readonly options: OrtSessionOptionsLike | undefined;
}

interface MutableInstrumentation {
  name: string;
  cycle: number;
  runs: number;
  signatures: string[];
  released: boolean;
  createdAtNs: bigint | undefined;
  options: OrtSessionOptionsLike | undefined;
}

const instrumentations = new WeakMap<object, MutableInstrumentation>();
const cycles = new WeakMap<PhaseHost, Map<string, number>>();

/** The instrumentation of a session returned by {@link instrumentSession}, or undefined. */
export function sessionInstrumentation(session: object): SessionInstrumentation | undefined {
  return instrumentations.get(session);
}

/** The phase that groups everything about one named session: `onnx:<name>`. */
export function sessionPhaseName(name: string): string {
  return `onnx:${name}`;
}

function nextCycle(host: PhaseHost, name: string): number {
  let byName = cycles.get(host);
  if (!byName) {
    byName = new Map();
    cycles.set(host, byName);
  }
  const cycle = (byName.get(name) ?? 0) + 1;
  byName.set(name, cycle);
  return cycle;
}

/**
 * Wraps `run()` in the phase `onnx:<name> / run` with the input shapes as attributes, and
 * `release()` in `onnx:<name> / release`, so memory readings line up with inference calls and
 * create/release cycles. onnxruntime has no memory API: pair this with the tracker's process
 * collector (host RSS) and the NVML collector (device memory). The phases ask for readings
 * (`PhaseOptions.readings`), so their records carry RSS read at their enter and exit.
 *
 * Returns a proxy of the session: every other member is the session's own.
 *
 * @example
 * const session = instrumentSession(await ort.InferenceSession.create(path), tracker, { name: "encoder" });
 * await session.run({ input }); // phase "onnx:encoder / run" with { onnx_input_shapes: { input: [1, 3, 224, 224] } }
 */
export function instrumentSession<S extends OrtSessionLike>(
  session: S,
  host: PhaseHost,
  options: InstrumentSessionOptions,
): S {
  validateName(options.name);
  const state: MutableInstrumentation = {
    name: options.name,
    cycle: nextCycle(host, options.name),
    runs: 0,
    signatures: [],
    released: false,
    createdAtNs: undefined,
    options: undefined,
  };
  return wrap(session, host, state, options);
}

/**
 * Creates a session inside the phase `onnx:<name> / create` (attributes: cycle, session options,
 * RSS before) and instruments it like {@link instrumentSession}. Each create of the same name on
 * the same host is a new cycle, so growth per create/release cycle shows up as one series.
 *
 * @example
 * const session = await createInstrumentedSession(ort, "model.onnx", { enableMemPattern: false }, tracker, { name: "tts" });
 * await session.run(feeds);
 * await session.release(); // phase "onnx:tts / release" with { onnx_cycle: 1 }
 */
export async function createInstrumentedSession<S extends OrtSessionLike, O extends OrtSessionOptionsLike>(
  ort: OrtNamespace<S, O>,
  model: string | Uint8Array,
  sessionOptions: O | undefined,
  host: PhaseHost,
  options: InstrumentSessionOptions,
): Promise<S> {
  validateName(options.name);
  const cycle = nextCycle(host, options.name);
  const attributes: JsonObject = {
    onnx_session: options.name,
    onnx_cycle: cycle,
    ...sessionOptionAttributes(sessionOptions),
  };
  if (options.recordRss !== false) attributes.onnx_rss_bytes = process.memoryUsage.rss();
  if (typeof model === "string") attributes.onnx_model = model;
  else attributes.onnx_model_bytes = model.byteLength;

  const readings = options.readings !== false;
  const createdAtNs = systemClock.nowNs();
  const session = await host.phase(
    sessionPhaseName(options.name),
    () =>
      host.phase(
        "create",
        () =>
          typeof model === "string"
            ? ort.InferenceSession.create(model, sessionOptions)
            : ort.InferenceSession.create(model, sessionOptions),
        { metadata: attributes, readings },
      ),
    { metadata: { onnx_session: options.name }, readings },
  );
  const state: MutableInstrumentation = {
    name: options.name,
    cycle,
    runs: 0,
    signatures: [],
    released: false,
    createdAtNs,
    options: sessionOptions,
  };
  return wrap(session, host, state, options);
}

function wrap<S extends OrtSessionLike>(
  session: S,
  host: PhaseHost,
  state: MutableInstrumentation,
  options: InstrumentSessionOptions,
): S {
  const outer = sessionPhaseName(state.name);
  // The session's phases ask for readings at their boundaries (PhaseOptions.readings): a run
  // takes hundreds of microseconds or more, so the tracker reads collectors too costly for every
  // boundary (the process collector's RSS) at its enter and exit, and the phase shows its own growth.
  const readings = options.readings !== false;
  const outerOptions: PhaseOptions = { metadata: { onnx_session: state.name }, readings };
  const runPhases = options.runPhases !== false;
  const recordRss = options.recordRss !== false;

  const run = (...args: unknown[]): Promise<unknown> => {
    state.runs += 1;
    const call = () => Reflect.apply(session.run, session, args) as Promise<unknown>;
    if (!runPhases) return call();
    const feeds = args[0];
    const shapes = inputShapes(feeds);
    const signature = inputSignature(feeds);
    const isNew = !state.signatures.includes(signature);
    if (isNew) state.signatures.push(signature);
    const attributes: JsonObject = {
      onnx_session: state.name,
      onnx_cycle: state.cycle,
      onnx_run: state.runs,
      onnx_input_shapes: shapes,
      onnx_input_signature: signature,
      onnx_new_input_signature: isNew,
      onnx_distinct_input_signatures: state.signatures.length,
    };
    return host.phase(outer, () => host.phase("run", call, { metadata: attributes, readings }), outerOptions);
  };

  const release = (): Promise<void> => {
    const attributes: JsonObject = {
      onnx_session: state.name,
      onnx_cycle: state.cycle,
      onnx_runs: state.runs,
    };
    if (recordRss) attributes.onnx_rss_bytes = process.memoryUsage.rss();
    return host.phase(
      outer,
      () =>
        host.phase(
          "release",
          async () => {
            await session.release();
            state.released = true;
          },
          { metadata: attributes, readings },
        ),
      outerOptions,
    );
  };

  const proxy = new Proxy(session, {
    get(target, property) {
      if (property === "run") return run;
      if (property === "release") return release;
      // Getters and methods run against the real session (it may keep private state).
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  instrumentations.set(proxy, state);
  return proxy;
}

/** Input dims by name, e.g. `{ input: [1, 3, 224, 224] }`; non-tensor inputs are left out. */
export function inputShapes(feeds: unknown): JsonObject {
  const shapes: JsonObject = {};
  if (typeof feeds !== "object" || feeds === null) return shapes;
  for (const [name, value] of Object.entries(feeds as Record<string, OrtValueLike>)) {
    const dims = value?.dims;
    if (Array.isArray(dims)) shapes[name] = dims.map(Number);
  }
  return shapes;
}

/** A stable key for the inputs' names, types and shapes, e.g. `input:float32[1,3,224,224]`. */
export function inputSignature(feeds: unknown): string {
  if (typeof feeds !== "object" || feeds === null) return "";
  return Object.keys(feeds)
    .sort()
    .map((name) => {
      const value = (feeds as Record<string, OrtValueLike>)[name];
      const dims = Array.isArray(value?.dims) ? `[${value.dims.join(",")}]` : "";
      return `${name}:${value?.type ?? "?"}${dims}`;
    })
    .join(";");
}

/** The session options worth recording (memory-relevant, JSON-safe), as `onnx_*` attributes. */
export function sessionOptionAttributes(options: OrtSessionOptionsLike | undefined): JsonObject {
  const attributes: JsonObject = {};
  if (!options) return attributes;
  const copy = (key: string, value: unknown) => {
    if (typeof value === "boolean" || typeof value === "string" || typeof value === "number") {
      attributes[key] = value;
    }
  };
  copy("onnx_enable_cpu_mem_arena", options.enableCpuMemArena);
  copy("onnx_enable_mem_pattern", options.enableMemPattern);
  copy("onnx_execution_mode", options.executionMode);
  copy("onnx_graph_optimization_level", options.graphOptimizationLevel);
  copy("onnx_intra_op_num_threads", options.intraOpNumThreads);
  copy("onnx_inter_op_num_threads", options.interOpNumThreads);
  copy("onnx_enable_profiling", options.enableProfiling);
  if (Array.isArray(options.executionProviders)) {
    attributes.onnx_execution_providers = options.executionProviders.map((provider) =>
      typeof provider === "string" ? provider : String(provider.name),
    );
  }
  return attributes;
}

function validateName(name: unknown): void {
  if (typeof name !== "string" || name.trim().length === 0) {
    throw new InvalidConfigError("name", "give the session a non-empty name, e.g. { name: 'encoder' }");
  }
}
