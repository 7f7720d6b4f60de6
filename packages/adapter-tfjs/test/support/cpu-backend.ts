import * as tf from "@tensorflow/tfjs";

/**
 * The cpu backend, without tfjs's console advice to install tfjs-node on its first write (tfjs
 * prints its warnings unless `IS_TEST` or `PROD` is set; `PROD` would also skip its checks).
 */
export async function useCpuBackend(): Promise<void> {
  tf.env().set("IS_TEST", true);
  await tf.setBackend("cpu");
}
