import type * as Tf from "@tensorflow/tfjs";

/** The `tf` namespace, whichever package provides it. */
export type TfNamespace = typeof Tf;

/** The TensorFlow.js build the example runs on. */
export interface LoadedTensorFlow {
  readonly tf: TfNamespace;
  /** The package it came from. */
  readonly packageName: string;
}

/** Native builds first: they run on TensorFlow's C library (and the GPU for -gpu). */
const NATIVE_PACKAGES = ["@tensorflow/tfjs-node-gpu", "@tensorflow/tfjs-node"] as const;

/**
 * `@tensorflow/tfjs-node-gpu` or `@tensorflow/tfjs-node` when installed (add one to this project's
 * dependencies to use it), else the pure-JavaScript `@tensorflow/tfjs` on its `cpu` backend.
 * `STORMLOG_TFJS=@tensorflow/tfjs` forces the pure-JavaScript build.
 */
export async function loadTensorFlow(): Promise<LoadedTensorFlow> {
  const forced = process.env.STORMLOG_TFJS;
  const candidates = forced ? [forced] : NATIVE_PACKAGES;
  for (const packageName of candidates) {
    if (packageName === "@tensorflow/tfjs") break;
    try {
      const tf = (await import(packageName)) as TfNamespace;
      await tf.ready();
      return { tf, packageName };
    } catch {
      // Not installed, or its native library does not load here: try the next one.
    }
  }
  const tf = await import("@tensorflow/tfjs");
  // Production mode: no debug checks, and no "install tfjs-node" banner on the first tensor.
  tf.enableProdMode();
  await tf.ready();
  return { tf, packageName: "@tensorflow/tfjs" };
}
