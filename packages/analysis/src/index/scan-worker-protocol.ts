/** Messages between `piece-scan.ts` and its scan workers (`scan-worker.ts`). */
import type { DigestJson } from "../input/digest.js";
import type { PieceOutcome } from "../input/pieces.js";

/** A piece of a segment (or a whole one: `start` 0, `end` Infinity) to scan, and where its aggregate goes. */
export interface ScanUnit {
  readonly path: string;
  readonly hint: string | null;
  readonly defaultSessionId: string;
  readonly start: number;
  readonly end: number;
  /** Its aggregate file, and the stamp that file carries. */
  readonly file: string;
  readonly stamp: string;
}

/** Units to scan: each worker takes the next off `counter` (an Int32Array of one). */
export interface ScanTask {
  readonly id: number;
  readonly units: readonly ScanUnit[];
  readonly counter: SharedArrayBuffer;
}

/**
 * A unit a worker scanned and stored (`outcome` null: its scan threw, or its file could not be
 * written), or, with `unit` -1, that it took the last unit there was.
 */
export interface WorkerReply {
  readonly id: number;
  readonly unit: number;
  readonly outcome: PieceOutcome | null;
  readonly digest: DigestJson | null;
}
