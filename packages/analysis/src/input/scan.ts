/**
 * The fused scan: works out which segment files an input holds (as the sink reader does) and reads
 * each one once, in chunks, into a `SegmentAggregate`. Canonical lines take the byte-level fast
 * path (`fast-line.ts`); every other line is decoded exactly as `@stormlog/sink`'s reader decodes it.
 */
import { closeSync, readSync, statSync } from "node:fs";
import type { TelemetryEvent } from "@stormlog/core";
import {
  isCutShortLine,
  isPythonBlank,
  LineEndFinder,
  lineTooLong,
  MAX_LINE_BYTES,
  openRegularFileSync,
  utf8LineText,
  utf8TailText,
} from "@stormlog/core/internal";
import { LIVE_BY_PHASE_KEY } from "@stormlog/phases/internal";
import { TelemetryInputAccessError } from "@stormlog/sink";
import {
  decodeTelemetryEventLine,
  fileSystemErrorCode,
  removedWhileRead,
  type TelemetryInputSegment,
} from "@stormlog/sink/internal";
import { TimeRangeError } from "../errors.js";
import {
  Accumulator,
  FAST_BOUNDARY,
  FAST_COUNTED,
  FAST_SAMPLE,
  FAST_SAMPLE_BIRTHS,
  fastLineUse,
  type LineFields,
  type RankPart,
  type RankSeed,
  roomForSamples,
  type SegmentAggregate,
} from "./aggregate.js";
import { CanonicalLineReader } from "./fast-line.js";

/** Chunk size of segment reads; memory stays bounded by this plus the longest line. */
const CHUNK_BYTES = 4 << 20;
/** Most samples the first rank's columns are sized for (a sink's segments hold at most a few 10,000 events). */
const MAX_EXPECTED_SAMPLES = 1 << 16;

/**
 * A sample's live tensors by birth phase, when its metadata has them (parsed only then, and its
 * exact timestamp made only then: few samples have them, and bigints are garbage for the others).
 */
function addBirths(part: RankPart, line: LineFields, buf: Buffer, start: number, end: number): void {
  let births: unknown;
  try {
    births = (JSON.parse(buf.toString("utf8", start, end)) as Record<string, unknown>)[LIVE_BY_PHASE_KEY];
  } catch {
    return;
  }
  if (typeof births === "object" && births !== null && !Array.isArray(births))
    part.births.push({ timestampNs: line.timestampNs(), json: JSON.stringify(births) });
}

/**
 * Scans one JSONL segment into an aggregate. `onBytes` is told about progress (bytes read so far).
 * Throws the reader's errors for a malformed line; a final line cut short (no newline) that does
 * not parse is dropped with a warning, as the reader does.
 */
export async function scanSegment(
  segment: TelemetryInputSegment,
  onBytes?: (bytes: number) => void,
): Promise<SegmentAggregate> {
  return scanSegmentSync(segment, onBytes);
}

/**
 * A read buffer shared by the scans of one analysis (`scanSegmentSync`'s `scratch`): one buffer for
 * every segment instead of one each, so that memory does not wait on the collector to free them.
 */
export interface ScanScratch {
  buf: Buffer | null;
  /**
   * The samples of the last rank parts the scan of a segment's range left (`Accumulator.recentSamples`),
   * and the segment's path: the segment's next range sizes its first rank parts for them.
   */
  ranks?: { readonly path: string; readonly samples: number };
}

/** `scanSegment`, blocking (it reads synchronously anyway: the scan is CPU-bound). */
export function scanSegmentSync(
  segment: TelemetryInputSegment,
  onBytes?: (bytes: number) => void,
  scratch: ScanScratch = { buf: null },
): SegmentAggregate {
  return scanRangeSync(segment, WHOLE, onBytes, scratch).aggregate;
}

/**
 * A byte range of a segment scanned on its own (a piece of a big segment, see `pieces.ts`): its
 * lines are numbered from 1 in the aggregate; what the scan of the whole segment would carry into
 * it from the lines before (their count, the last session, rank parts' timestamp origins) is given
 * where known, so that messages, errors and range checks are the same.
 */
export interface ScanRange {
  /** Byte offset of its first line: 0, or just after a newline. */
  readonly start: number;
  /** Byte offset just past its last line's newline; `Infinity`: to the end of the file. */
  readonly end: number;
  /** Lines before it (messages name the segment's line numbers). */
  readonly lineOffset: number;
  /** Session of the line before it (a warning about a cut final line names it); else the segment's hint. */
  readonly lastSession?: string | null;
  /** Timestamp origins of rank parts the lines before it began (`seriesKey`). */
  readonly seeds?: ReadonlyMap<string, RankSeed>;
}

const WHOLE: ScanRange = { start: 0, end: Number.POSITIVE_INFINITY, lineOffset: 0 };

/** What a range's scan ends with: its aggregate, and the session of its last line (else the one it began with). */
export interface RangeScan {
  readonly aggregate: SegmentAggregate;
  readonly lastSession: string | null;
}

/**
 * The fast path's reader, one per thread for every scan: with a reader per range (and so a view of
 * the read buffer per range), a cold scan threw away the compiled reader at each collection, as the
 * code held on to the views that died, and compiled it again. It keeps nothing of a line once the
 * next is read; it holds the last scan's read buffer (4 MB; not one grown for a longer line) until
 * another scan gives it one.
 */
const LINE_READER = new CanonicalLineReader();

/**
 * One range's lines, read one after the other into an aggregate. A class rather than closures made
 * by each scan: a closure made anew for each range is a new call target each time, and the code the
 * optimizing compiler made for one range's was thrown away at the next (a cold scan compiled it
 * again for nearly every piece, on the core the other scanning thread needed).
 */
class RangeScanner {
  lineNumber = 0;
  stopped = false;
  readonly reader = LINE_READER;
  private readonly ends = new LineEndFinder();

  constructor(
    private readonly segment: TelemetryInputSegment,
    private readonly lineOffset: number,
    readonly accumulator: Accumulator,
    public lastSession: string | null,
  ) {}

  /** The lines of `buf[start, end)` up to its last line end; where the rest (a line not ended yet) starts. */
  lines(buf: Buffer, start: number, end: number): number {
    const ends = this.ends;
    const reader = this.reader;
    // Sparse: the kernel reads most lines, and a line end is asked for only at the others.
    ends.begin(end === buf.length ? buf : buf.subarray(0, end), true);
    for (;;) {
      // Runs of plain sample and boundary lines are read in one call into the kernel; the line after a run one by one.
      const rows = reader.readRows(buf, start, end);
      if (rows > 0) {
        const accumulator = this.accumulator;
        for (let i = 0; i < rows; i++) {
          const lineNumber = ++this.lineNumber;
          if (reader.addRow(i, accumulator, lineNumber) !== null) continue;
          reader.takeRow(i);
          accumulator.addBoundaryLine(reader, lineNumber, buf);
        }
        this.lastSession = reader.rowSession(rows - 1);
        start = reader.rowsEnd;
      }
      const lineEnd = ends.find(start);
      if (lineEnd === -1) return start;
      this.line(buf, start, lineEnd, true);
      if (this.stopped) return start;
      start = lineEnd + 1;
    }
  }

  line(buf: Buffer, start: number, end: number, terminated: boolean): void {
    this.lineNumber++;
    if (end > start && buf[end - 1] === 0x0d) end--;
    if (end === start) return;
    const reader = this.reader;
    if (buf[start] !== 0x7b || !reader.read(buf, start, end)) {
      this.slow(buf, start, end, terminated);
      return;
    }
    this.lastSession = reader.sessionId;
    switch (
      fastLineUse(reader.eventType, reader.metadataOrigin, reader.metadataBirths, reader.metadataInexact)
    ) {
      case FAST_SAMPLE:
        this.accumulator.addLine(reader, this.lineNumber);
        return;
      case FAST_SAMPLE_BIRTHS: {
        const part = this.accumulator.addLine(reader, this.lineNumber);
        addBirths(part, reader, buf, reader.metadataStart, reader.metadataEnd);
        return;
      }
      case FAST_BOUNDARY:
        this.accumulator.addBoundaryLine(reader, this.lineNumber, buf);
        return;
      case FAST_COUNTED:
        this.accumulator.addLine(reader, this.lineNumber);
        return;
      default:
        this.slow(buf, start, end, terminated);
    }
  }

  /** A line the fast path does not take: decoded as the sink's reader decodes it. */
  private slow(buf: Buffer, start: number, end: number, terminated: boolean): void {
    const { path, defaultSessionId } = this.segment;
    const lineNumber = this.lineOffset + this.lineNumber;
    // A final line without its newline may be cut inside its last character (a crash): it is dropped
    // as cut short below, as the sink's reader drops it.
    const text = (terminated ? utf8LineText : utf8TailText)(buf, start, end, path, lineNumber);
    if (isPythonBlank(text)) return;
    let event: TelemetryEvent;
    try {
      event = decodeTelemetryEventLine(text, { file: path, line: lineNumber }, defaultSessionId, {
        upgradeTo: 3,
      });
    } catch (error) {
      if (isCutShortLine({ text, terminated }, error)) {
        this.accumulator.warn(
          `${path}:${lineNumber}: dropped a final line cut short (${text.length} characters, no newline)`,
          this.lastSession,
        );
        this.stopped = true;
        return;
      }
      throw error;
    }
    this.lastSession = event.session_id;
    this.accumulator.addEvent(event, this.lineNumber);
  }
}

/** Scans `range` of a segment (see `ScanRange`); `onBytes` is told the bytes of the range read so far. */
export function scanRangeSync(
  segment: TelemetryInputSegment,
  range: ScanRange,
  onBytes?: (bytes: number) => void,
  scratch: ScanScratch = { buf: null },
): RangeScan {
  const path = segment.path;
  const { start: from, end: to, lineOffset } = range;
  let expected = 256;
  try {
    // Sample lines are ~300-700 bytes: size the first rank's columns so that they rarely grow. Capped:
    // in one file holding many ranks, the first rank's columns sized for the whole file stayed mostly
    // empty (22 MB of 220 MB), and they grow by doubling anyway.
    const bytes = Math.min(to, statSync(path).size) - from;
    expected = Math.min(MAX_EXPECTED_SAMPLES, Math.max(256, Math.ceil(bytes / 600)));
  } catch {
    // Reported by the open below.
  }
  // A range after another of the same segment: its first rank parts are sized like the last ones there.
  const carried = from > 0 && scratch.ranks?.path === path ? scratch.ranks.samples : 0;
  if (carried > 0) expected = Math.min(expected, roomForSamples(carried));
  const accumulator = new Accumulator(expected, range.seeds ?? null, carried);
  const scanner = new RangeScanner(
    segment,
    lineOffset,
    accumulator,
    range.lastSession === undefined ? segment.hint : range.lastSession,
  );

  // Synchronous reads: the scan is CPU-bound, and a round trip through the thread pool per chunk
  // only adds latency (much of it on a loaded machine).
  let fd: number;
  try {
    fd = openRegularFileSync(path);
  } catch (error) {
    // Listed a moment ago and gone now: a live writer's retention pruned it. Read without it, as the
    // reader does (said once, by the range that starts the file).
    if (fileSystemErrorCode(error) === "ENOENT") {
      if (from === 0) accumulator.warn(removedWhileRead(path), null);
      return { aggregate: accumulator.finish(0), lastSession: scanner.lastSession };
    }
    throw TelemetryInputAccessError.wrap(path, error);
  }
  try {
    let buf = scratch.buf ?? scanner.reader.chunkBuffer(CHUNK_BYTES);
    let filled = 0;
    let position = from;
    for (;;) {
      if (filled === buf.length) {
        if (filled >= MAX_LINE_BYTES) throw lineTooLong(path, lineOffset + scanner.lineNumber + 1);
        // One line longer than the buffer: grow it.
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, filled);
        buf = bigger;
      }
      const wanted = Math.min(buf.length - filled, to - position);
      const bytesRead = wanted > 0 ? readSync(fd, buf, filled, wanted, position) : 0;
      position += bytesRead;
      const end = filled + bytesRead;
      if (bytesRead === 0) {
        // A final `\r` ends its line as a `\n` would.
        if (end > 0 && !scanner.stopped) scanner.line(buf, 0, end, buf[end - 1] === 0x0d);
        break;
      }
      const start = scanner.lines(buf, 0, end);
      if (scanner.stopped) break;
      buf.copy(buf, 0, start, end);
      filled = end - start;
      onBytes?.(position - from);
    }
    scratch.buf = buf;
    scratch.ranks = { path, samples: accumulator.recentSamples };
  } catch (error) {
    // A read refused (EIO, EISDIR...) is typed; a span too long for one capture names its line.
    throw TimeRangeError.locate(
      TelemetryInputAccessError.wrap(path, error),
      `${path}:${lineOffset + scanner.lineNumber}`,
    );
  } finally {
    scanner.reader.releaseBufferOver(CHUNK_BYTES);
    closeSync(fd);
  }
  return { aggregate: accumulator.finish(scanner.lineNumber), lastSession: scanner.lastSession };
}

/** Aggregates in-memory events (one batch, storage order = array order). */
export function aggregateEvents(events: Iterable<TelemetryEvent>): SegmentAggregate {
  const accumulator = new Accumulator();
  let line = 0;
  for (const event of events) accumulator.addEvent(event, ++line);
  return accumulator.finish(line);
}
