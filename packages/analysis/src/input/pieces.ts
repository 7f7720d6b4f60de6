/**
 * A big segment (a whole job's records in one `.jsonl`) is scanned and stored in pieces: byte
 * ranges that start just after a newline, each scanned on its own into an aggregate of its own, so
 * that memory holds a piece rather than the file, and two threads can share the scan. A piece is
 * scanned without what came before it (its lines numbered from 1, its rank parts' timestamp origins
 * its own first events); the loader combines a rank's parts as it combines segments' (storage order
 * = the piece's line offset plus its line). `PieceSettler` then walks the pieces in order and says
 * which to scan again with what came before: one whose scan threw (the error a scan of the whole
 * segment throws comes from that), one with a warning (its message names the segment's line), or
 * one with a timestamp its rank's origin may not reach exactly. Otherwise each piece's aggregate is
 * what a scan of the whole segment gives for its lines.
 */
import { closeSync, readSync } from "node:fs";
import { openRegularFileSync } from "@stormlog/core/internal";
import { fileSystemErrorCode, type TelemetryInputSegment } from "@stormlog/sink/internal";
import { type RankSeed, seriesKey } from "./aggregate.js";
import type { RangeScan, ScanRange } from "./scan.js";

/**
 * Bytes per piece (`STORMLOG_PIECE_BYTES` overrides it, for tests and benchmarks); a segment up to
 * 1.5 times this is scanned whole. Small enough that a piece's aggregate (about an eighth of its
 * bytes on the 64-rank job) is a few MB, large enough that a rank of the job seldom spans two.
 */
export const PIECE_BYTES = 16 << 20;

/** `PIECE_BYTES`, or its override. */
export function pieceBytes(): number {
  const override = Number(process.env.STORMLOG_PIECE_BYTES);
  return Number.isSafeInteger(override) && override > 0 ? override : PIECE_BYTES;
}

/** A piece's bytes: from `start` (0, or just after a newline) to `end` (`Infinity` for the last: the end of the file). */
export interface PieceRange {
  readonly start: number;
  readonly end: number;
}

/**
 * The pieces of the segment at `path` (`size` bytes): about `bytes` each, each starting just after
 * a newline; one piece (the whole file) when it is small or has no newline to cut at.
 */
export function pieceRanges(path: string, size: number, bytes: number): PieceRange[] {
  const starts = [0];
  if (size > bytes * 1.5) {
    let fd: number;
    try {
      fd = openRegularFileSync(path);
    } catch (error) {
      // Pruned since it was listed: one piece, whose scan says so.
      if (fileSystemErrorCode(error) === "ENOENT") return [{ start: 0, end: Number.POSITIVE_INFINITY }];
      throw error;
    }
    try {
      const block = Buffer.allocUnsafe(64 << 10);
      let at = bytes;
      while (at < size) {
        // The first newline at or after `at - 1`: the piece starts after it.
        let position = at - 1;
        let cut = -1;
        while (cut < 0) {
          const read = readSync(fd, block, 0, block.length, position);
          if (read === 0) break;
          const newline = block.subarray(0, read).indexOf(10);
          if (newline >= 0) cut = position + newline + 1;
          else position += read;
        }
        if (cut < 0 || cut >= size) break;
        starts.push(cut);
        at = Math.max(cut, at) + bytes;
        // The rest is too small to be a piece of its own.
        if (size - at < bytes / 2) break;
      }
    } finally {
      closeSync(fd);
    }
  }
  return starts.map((start, k) => ({ start, end: starts[k + 1] ?? Number.POSITIVE_INFINITY }));
}

/**
 * What settling a piece needs of its scan (plain data: it crosses from a worker): its lines, its
 * last line's session, whether it warned, and per session's rank its timestamp origin and range.
 */
export interface PieceOutcome {
  readonly lineCount: number;
  readonly lastSession: string | null;
  readonly warned: boolean;
  /** `[seriesKey, base, base seconds, base nanoseconds, earliest, latest]`, timestamps as decimal strings. */
  readonly origins: readonly (readonly [string, string, number, number, string, string])[];
}

/** The outcome of a piece's scan. */
export function outcomeOf(scan: RangeScan): PieceOutcome {
  const { aggregate } = scan;
  const origins: [string, string, number, number, string, string][] = [];
  for (const session of aggregate.sessions.values()) {
    for (const part of session.ranks.values()) {
      if (part.base === null || part.minTs === null || part.maxTs === null) continue;
      origins.push([
        seriesKey(part.sessionId, part.rank),
        part.base.toString(),
        part.baseHead,
        part.baseTail,
        part.minTs.toString(),
        part.maxTs.toString(),
      ]);
    }
  }
  return {
    lineCount: aggregate.lineCount,
    lastSession: scan.lastSession,
    warned: aggregate.warnings.length > 0,
    origins,
  };
}

/**
 * How far from its rank's origin a later piece's timestamps may lie and still be within a scan of
 * the whole segment's range check for sure (`RankPart.offsetOf` allows 9,007,199 s; one second
 * less, whatever the nanoseconds).
 */
const SURE_SPAN_NS = 9_007_198n * 1_000_000_000n;

/**
 * Walks a segment's pieces in order (`next` for each): says which to scan again, and gives each
 * piece its line offset.
 */
export class PieceSettler {
  private lineOffset = 0;
  private lastSession: string | null;
  /** Rank parts' origins, as the first piece holding each began them. */
  private readonly seeds = new Map<string, RankSeed>();

  constructor(segment: TelemetryInputSegment) {
    this.lastSession = segment.hint;
  }

  /**
   * The range to scan piece `range` again with (what came before it), when `outcome` (null: its
   * scan threw, or none came back) is not what a scan of the whole segment gives; else null. The
   * first piece's scan is (nothing came before it).
   */
  redo(range: PieceRange, outcome: PieceOutcome | null): ScanRange | null {
    if (outcome !== null && (range.start === 0 || (!outcome.warned && this.agrees(outcome)))) return null;
    return {
      start: range.start,
      end: range.end,
      lineOffset: this.lineOffset,
      lastSession: this.lastSession,
      seeds: new Map(this.seeds),
    };
  }

  /** Takes the piece's final outcome in; returns its line offset. */
  accept(outcome: PieceOutcome): number {
    const offset = this.lineOffset;
    this.lineOffset += outcome.lineCount;
    this.lastSession = outcome.lastSession;
    for (const [key, base, head, tail] of outcome.origins)
      if (!this.seeds.has(key)) this.seeds.set(key, { base: BigInt(base), head, tail });
    return offset;
  }

  /** Whether every rank part the piece continues lies surely within reach of the origin it began with. */
  private agrees(outcome: PieceOutcome): boolean {
    for (const [key, , , , earliest, latest] of outcome.origins) {
      const seed = this.seeds.get(key);
      if (seed === undefined) continue;
      const low = BigInt(earliest) - seed.base;
      const high = BigInt(latest) - seed.base;
      if (low < -SURE_SPAN_NS || high > SURE_SPAN_NS) return false;
    }
    return true;
  }
}
