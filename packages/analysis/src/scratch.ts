/**
 * Working arrays reused from one call to the next (one per slot), for the per-rank analyses: a
 * rank's working arrays live for a few milliseconds, but V8 frees typed arrays' memory only once
 * tens of MB of them have piled up, so fresh ones per rank make memory grow with the input. Held
 * weakly: the collector may take them back between analyses (they are then made again).
 * What a slot returns is valid until the next call for the same slot; its contents are not cleared.
 */

/** A length with headroom, so that ranks of slightly different sizes reuse the same array. */
export const withHeadroom = (n: number): number => Math.max(64, Math.ceil(n * 1.125));

type Scratch = Float64Array | Int32Array;
const slots = new Map<string, WeakRef<Scratch>>();

function scratch<T extends Scratch>(slot: string, n: number, make: new (length: number) => T): T {
  const kept = slots.get(slot)?.deref();
  let array: T;
  if (kept instanceof make && kept.length >= n) {
    array = kept;
  } else {
    array = new make(withHeadroom(n));
    slots.set(slot, new WeakRef<Scratch>(array));
  }
  return array.subarray(0, n) as T;
}

/** `n` doubles of slot `slot`. */
export const scratchDoubles = (slot: string, n: number): Float64Array => scratch(slot, n, Float64Array);

/** `n` 32-bit integers of slot `slot`. */
export const scratchInts = (slot: string, n: number): Int32Array => scratch(slot, n, Int32Array);
