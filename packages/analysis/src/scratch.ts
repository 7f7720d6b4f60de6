/**
 * Working arrays reused from one call to the next (one per slot), for the per-rank analyses: a
 * rank's working arrays live for a few milliseconds, but V8 frees typed arrays' memory only once
 * tens of MB of them have piled up, so fresh ones per rank make memory grow with the input. Held
 * weakly: the collector may take them back between analyses (they are then made again).
 * What a slot returns is valid until the next call for the same slot; its contents are not cleared.
 */
const doubles = new Map<string, WeakRef<Float64Array>>();
const ints = new Map<string, WeakRef<Int32Array>>();

/** Headroom, so that ranks of slightly different sizes reuse the same array. */
const capacity = (n: number): number => Math.max(64, Math.ceil(n * 1.125));

/** `n` doubles of slot `slot`. */
export function scratchDoubles(slot: string, n: number): Float64Array {
  let array = doubles.get(slot)?.deref();
  if (array === undefined || array.length < n) {
    array = new Float64Array(capacity(n));
    doubles.set(slot, new WeakRef(array));
  }
  return array.subarray(0, n);
}

/** `n` 32-bit integers of slot `slot`. */
export function scratchInts(slot: string, n: number): Int32Array {
  let array = ints.get(slot)?.deref();
  if (array === undefined || array.length < n) {
    array = new Int32Array(capacity(n));
    ints.set(slot, new WeakRef(array));
  }
  return array.subarray(0, n);
}
