/**
 * The parts of the TensorFlow.js API the adapter uses, typed structurally so that the adapter
 * depends on no tfjs package at run time and accepts any tfjs 4.x build (`@tensorflow/tfjs`,
 * `tfjs-core` with a backend, `tfjs-node`, `tfjs-node-gpu`).
 */

/** What `tf.memory()` returns; backends add their own fields. */
export interface TfMemoryInfo {
  numBytes: number;
  numTensors: number;
  numDataBuffers: number;
  unreliable?: boolean;
  reasons?: string[];
  /** WebGL: bytes of live tensors held in textures. WebGPU: bytes of buffers in use. */
  numBytesInGPU?: number;
  /** WebGL: bytes of every texture allocated, in use or pooled. */
  numBytesInGPUAllocated?: number;
  /** WebGL: bytes of pooled, unused textures. */
  numBytesInGPUFree?: number;
  /** WebGPU: bytes of every buffer allocated, in use or pooled. */
  numBytesAllocatedInGPU?: number;
}

/** The counts tfjs's engine keeps itself (`tf.engine().state`), which `tf.memory()` copies. */
export interface TfEngineState {
  numBytes: number;
  numTensors: number;
  numDataBuffers: number;
  /** Per data buffer; birth-phase attribution reads string tensors' bytes from it. */
  readonly tensorInfo?: { get(dataId: object): { readonly bytes: number } | undefined };
}

/** A tensor as the engine tracks it (the fields of `tf.Tensor` that birth-phase attribution reads). */
export interface TfTrackedTensor {
  readonly id: number;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly size: number;
  readonly dataId: object;
}

/** `tf.engine()`, as far as the collector reads it. */
export interface TfEngine {
  /** The active backend's name; null before a backend is initialised. */
  readonly backendName: string | null;
  /** Replaced by `engine.reset()`: read it each time. */
  readonly state: TfEngineState;
  /** Counts a new tensor; every creation path goes through it (wrapped for birth-phase attribution). */
  trackTensor?(tensor: TfTrackedTensor, backend: unknown): void;
  /** Uncounts a disposed tensor (wrapped for birth-phase attribution). */
  disposeTensor?(tensor: TfTrackedTensor): void;
}

/** The `tf` namespace, as far as the collector reads it. */
export interface TfNamespace {
  memory(): TfMemoryInfo;
  getBackend(): string;
  /** The active backend object (`tf.backend()`). */
  backend(): object;
  /** tfjs's engine; optional, as builds that hide it still work through `memory()`. */
  engine?(): TfEngine;
}

/** One kernel of a `tf.profile()` result (`KernelInfo` in tfjs-core). */
export interface TfKernelInfo {
  name: string;
  bytesAdded: number;
  totalBytesSnapshot: number;
  tensorsAdded: number;
  totalTensorsSnapshot: number;
  inputShapes?: (number[] | null)[];
  outputShapes?: number[][];
  kernelTimeMs?: number | { error: string } | Promise<number | { error: string }>;
}

/** What `tf.profile()` resolves to (`ProfileInfo` in tfjs-core). */
export interface TfProfileInfo {
  newBytes: number;
  newTensors: number;
  peakBytes: number;
  kernels: TfKernelInfo[];
  result: unknown;
}

/** The `tf` namespace, as far as {@link profilePhase} reads it. */
export interface TfProfiler {
  profile(f: () => unknown): Promise<TfProfileInfo>;
}
