/** Messages between `piece-scan.ts` and its scan workers (`scan-worker.ts`). */
import type { DigestJson } from "../input/digest.js";
import type { PieceOutcome } from "../input/pieces.js";

/** A segment's pieces to scan: each worker takes the next off `counter` (an Int32Array of one). */
export interface ScanTask {
  readonly id: number;
  readonly path: string;
  readonly hint: string | null;
  readonly defaultSessionId: string;
  /** `[start, end]` of each piece (`end` Infinity for the last). */
  readonly ranges: readonly (readonly [number, number])[];
  /** Where each piece's aggregate file goes, and the stamp it carries. */
  readonly files: readonly string[];
  readonly stamps: readonly string[];
  readonly counter: SharedArrayBuffer;
}

/**
 * A piece a worker scanned and stored (`outcome` null: its scan threw, or its file could not be
 * written), or, with `piece` -1, that it took the last piece there was.
 */
export interface WorkerReply {
  readonly id: number;
  readonly piece: number;
  readonly outcome: PieceOutcome | null;
  readonly digest: DigestJson | null;
}
