import { type SinkSegment, segmentFilename } from "../directory/manifest.js";

/** The limits a segment set keeps (the reference's rollover and retention options). */
export interface SegmentLimits {
  readonly rolloverMaxEvents: number;
  readonly rolloverMaxBytes: number;
  readonly retentionMaxFiles: number;
  readonly retentionMaxTotalBytes: number;
}

/**
 * The segments of the directory as the manifest lists them, and the reference's rules over them:
 * when a segment is full (rollover), which one goes when over a retention limit, the next name.
 * Decisions only: the writer does the file operations.
 */
export class SegmentSet {
  list: SinkSegment[] = [];
  /** Index of the next segment file (`segment-NNNNNN.jsonl`). */
  nextIndex = 1;
  /** Segments closed because they reached a rollover limit, deleted by retention, and their bytes (this instance). */
  rolloverCount = 0;
  prunedCount = 0;
  prunedBytes = 0;

  constructor(private readonly limits: SegmentLimits) {}

  /** What recovery found in the directory (numbering never goes back). */
  adopt(list: SinkSegment[], nextIndex: number): void {
    this.list = list;
    this.nextIndex = Math.max(this.nextIndex, nextIndex);
  }

  /** The name the next segment gets. */
  nextFilename(): string {
    return segmentFilename(this.nextIndex);
  }

  /** Lists a segment just created for `sessionId` (under nextFilename()). */
  add(sessionId: string): SinkSegment {
    const segment = {
      filename: this.nextFilename(),
      event_count: 0,
      size_bytes: 0,
      closed: false,
      session_id: sessionId,
    };
    this.nextIndex++;
    this.list.push(segment);
    return segment;
  }

  remove(segment: SinkSegment): void {
    const index = this.list.indexOf(segment);
    if (index >= 0) this.list.splice(index, 1);
  }

  /** A segment holding this many records and bytes is full. */
  reachesRollover(events: number, bytes: number): boolean {
    return events >= this.limits.rolloverMaxEvents || bytes >= this.limits.rolloverMaxBytes;
  }

  /** Books one flush unit written to `segment`; true when it closed the segment (rollover). */
  book(segment: SinkSegment, events: number, bytes: number): boolean {
    segment.event_count += events;
    segment.size_bytes += bytes;
    if (segment.closed || !this.reachesRollover(segment.event_count, segment.size_bytes)) return false;
    segment.closed = true;
    this.rolloverCount++;
    return true;
  }

  /** The first closed segment while over a retention limit, as the reference (never the open one). */
  retentionVictim(): SinkSegment | undefined {
    const over =
      this.list.length > this.limits.retentionMaxFiles ||
      this.retainedBytes() > this.limits.retentionMaxTotalBytes;
    return over ? this.list.find((segment) => segment.closed) : undefined;
  }

  /** A segment deleted by retention. */
  pruned(segment: SinkSegment): void {
    this.remove(segment);
    this.prunedCount++;
    this.prunedBytes += segment.size_bytes;
  }

  retainedBytes(): number {
    let total = 0;
    for (const segment of this.list) total += segment.size_bytes;
    return total;
  }
}
