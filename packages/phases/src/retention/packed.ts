/**
 * One rank's retention input in typed arrays, to be judged on another thread: posting the
 * occurrences as objects (a structured clone of each span) cost the posting thread 52 ms for the
 * 16,000 occurrences of a 64-rank job; typed arrays are copied whole, and the strings and thread
 * ids each occurrence shares with others are sent once.
 */
import type { PhaseThreadId } from "../replay.js";
import type { BirthSnapshot } from "./births.js";
import type { RetentionInput, RetentionOccurrence, RetentionSpan } from "./verdicts.js";

/** Readings per occurrence in `PackedRetention.values`: enter and exit allocated, used, tensors. */
const READINGS = 6;

/** A phase path: its parts, and their `" / "`-joined form (`PhaseSpan.phasePath`). */
export interface PackedPath {
  readonly parts: readonly string[];
  readonly phasePath: string;
}

/** `packRetention`'s output: what `judgeRetention` is given, as arrays (see the file's comment). */
export interface PackedRetention {
  readonly lastSample: boolean;
  readonly births: readonly BirthSnapshot[];
  /** The distinct ranks, thread ids and paths (as parts) of the occurrences; `*Of` index them. */
  readonly ranks: readonly number[];
  readonly threads: readonly PhaseThreadId[];
  readonly paths: readonly PackedPath[];
  readonly rankOf: Uint32Array;
  readonly threadOf: Uint32Array;
  readonly pathOf: Uint32Array;
  readonly syntheticEnd: Uint8Array;
  /** Start and end times: plain bigints when one does not fit in 64 bits. */
  readonly startsNs: BigInt64Array | readonly bigint[];
  readonly endsNs: BigInt64Array | readonly bigint[];
  /** `READINGS` numbers per occurrence, in `RetentionOccurrence`'s order. */
  readonly values: Float64Array;
}

/** Indexes of distinct values, in order of first appearance. */
class Interner<Key, Value = Key> {
  readonly values: Value[] = [];
  private readonly indexes = new Map<Key, number>();

  index(key: Key, value: () => Value): number {
    let index = this.indexes.get(key);
    if (index === undefined) {
      index = this.values.length;
      this.indexes.set(key, index);
      this.values.push(value());
    }
    return index;
  }
}

function times(values: readonly bigint[]): BigInt64Array | readonly bigint[] {
  for (const value of values) if (BigInt.asIntN(64, value) !== value) return values;
  return BigInt64Array.from(values);
}

/** One rank's occurrences and input, packed (see `PackedRetention`). */
export function packRetention(
  occurrences: readonly RetentionOccurrence[],
  input: RetentionInput,
): PackedRetention {
  const n = occurrences.length;
  const ranks = new Interner<number>();
  const threads = new Interner<PhaseThreadId>();
  const paths = new Interner<string, PackedPath>();
  const rankOf = new Uint32Array(n);
  const threadOf = new Uint32Array(n);
  const pathOf = new Uint32Array(n);
  const syntheticEnd = new Uint8Array(n);
  const starts: bigint[] = new Array(n);
  const ends: bigint[] = new Array(n);
  const values = new Float64Array(n * READINGS);
  for (let i = 0; i < n; i++) {
    const o = occurrences[i]!;
    const { span } = o;
    rankOf[i] = ranks.index(span.rank, () => span.rank);
    threadOf[i] = threads.index(span.threadId, () => span.threadId);
    pathOf[i] = paths.index(span.phasePath, () => ({ parts: [...span.path], phasePath: span.phasePath }));
    syntheticEnd[i] = span.syntheticEnd ? 1 : 0;
    starts[i] = span.startNs;
    ends[i] = span.endNs;
    const at = i * READINGS;
    values[at] = o.enterAllocated;
    values[at + 1] = o.exitAllocated;
    values[at + 2] = o.enterUsed;
    values[at + 3] = o.exitUsed;
    values[at + 4] = o.enterTensors;
    values[at + 5] = o.exitTensors;
  }
  return {
    lastSample: input.lastSample,
    births: input.births ?? [],
    ranks: ranks.values,
    threads: threads.values,
    paths: paths.values,
    rankOf,
    threadOf,
    pathOf,
    syntheticEnd,
    startsNs: times(starts),
    endsNs: times(ends),
    values,
  };
}

/** A span as a verdict reads it, unpacked (a class: one shape for every occurrence). */
class UnpackedSpan implements RetentionSpan {
  constructor(
    readonly rank: number,
    readonly threadId: PhaseThreadId,
    readonly path: readonly string[],
    readonly phasePath: string,
    readonly startNs: bigint,
    readonly endNs: bigint,
    readonly syntheticEnd: boolean,
  ) {}
}

class UnpackedOccurrence implements RetentionOccurrence {
  constructor(
    readonly span: RetentionSpan,
    readonly enterAllocated: number,
    readonly exitAllocated: number,
    readonly enterUsed: number,
    readonly exitUsed: number,
    readonly enterTensors: number,
    readonly exitTensors: number,
  ) {}
}

/** `packRetention`'s occurrences and input back, as `judgeRetention` takes them. */
export function unpackRetention(packed: PackedRetention): {
  occurrences: RetentionOccurrence[];
  input: RetentionInput;
} {
  const n = packed.pathOf.length;
  const { values, startsNs, endsNs } = packed;
  const occurrences: RetentionOccurrence[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const path = packed.paths[packed.pathOf[i]!]!;
    const span = new UnpackedSpan(
      packed.ranks[packed.rankOf[i]!]!,
      packed.threads[packed.threadOf[i]!]!,
      path.parts,
      path.phasePath,
      startsNs[i]!,
      endsNs[i]!,
      packed.syntheticEnd[i] === 1,
    );
    const at = i * READINGS;
    occurrences[i] = new UnpackedOccurrence(
      span,
      values[at]!,
      values[at + 1]!,
      values[at + 2]!,
      values[at + 3]!,
      values[at + 4]!,
      values[at + 5]!,
    );
  }
  return { occurrences, input: { lastSample: packed.lastSample, births: packed.births } };
}
