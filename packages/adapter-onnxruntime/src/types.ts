/**
 * The parts of onnxruntime's JS API the adapter uses, typed structurally so that it depends on no
 * onnxruntime package at run time (onnxruntime-node, onnxruntime-web and onnxruntime-react-native
 * share this API through onnxruntime-common).
 */

/** An input or output value as far as its shape goes (`ort.Tensor`). */
export interface OrtValueLike {
  readonly dims?: readonly number[];
  readonly type?: string;
}

/** An `InferenceSession`. */
export interface OrtSessionLike {
  run(feeds: Record<string, OrtValueLike>, ...rest: never[]): Promise<unknown>;
  release(): Promise<void>;
  startProfiling?(): void;
  endProfiling?(): void;
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
}

/** The session options the adapter reads (and records as attributes). */
export interface OrtSessionOptionsLike {
  enableProfiling?: boolean;
  profileFilePrefix?: string;
  enableCpuMemArena?: boolean;
  enableMemPattern?: boolean;
  executionMode?: string;
  graphOptimizationLevel?: string;
  intraOpNumThreads?: number;
  interOpNumThreads?: number;
  executionProviders?: readonly (string | { readonly name: string })[];
}

/** The `ort` namespace, as far as {@link createInstrumentedSession} reads it. */
export interface OrtNamespace<S extends OrtSessionLike, O> {
  readonly InferenceSession: {
    create(uri: string, options?: O): Promise<S>;
    create(buffer: Uint8Array, options?: O): Promise<S>;
  };
}
