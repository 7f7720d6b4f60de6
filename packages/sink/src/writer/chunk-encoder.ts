import { encodeTelemetryRecord, type TelemetryEvent } from "@stormlog/core";
import { TelemetryLineEncoder } from "@stormlog/core/internal";

type Latin1Writer = { latin1Write?: (text: string, offset: number) => number };
/** `buffer.write(text, offset, "latin1")` without its argument juggling (Node's own fast method when present). */
const latin1Write: (buffer: Buffer, text: string, offset: number) => number =
  typeof (Buffer.prototype as Latin1Writer).latin1Write === "function"
    ? (buffer, text, offset) => (buffer as Latin1Writer).latin1Write!(text, offset)
    : (buffer, text, offset) => buffer.write(text, offset, "latin1");

/** Free room kept at the chunk's end before encoding a line into it (longer lines take core's path). */
const ENCODE_ROOM = 64 << 10;
/**
 * A chunk buffer's starting size; a burst grows it (doubling) up to what a pass holds before it writes.
 * Small because V8 counts a buffer's whole size as external memory: two 4 MB chunks per session made a
 * tracked training loop run about one more full collection per session (measured with --trace-gc).
 */
const CHUNK_BYTES = 4 * ENCODE_ROOM;
/** A chunk buffer grown beyond this by a burst is replaced by a small one once it is empty. */
const KEEP_CHUNK_BYTES = 16 << 20;
/** The chunk of an encoder that shed its buffers. */
const NO_BYTES = Buffer.alloc(0);

/**
 * Encoded lines, straight into a reused byte buffer: first the pending write's, then the open unit
 * (the reference's buffer: lines not yet flushed, fewer than flushEveryEvents). Building strings
 * and converting them later costs several times more, most of it in garbage collection. A write
 * takes the buffer and encoding goes on in the other one (`take`).
 */
export class ChunkEncoder {
  /** Bytes in the chunk. */
  length = 0;
  /** Lines of the open unit, their bytes, and their session. */
  unitCount = 0;
  unitBytes = 0;
  unitSession: string | null = null;
  /** Why the last `encode` returned 0. */
  lastError = "";

  private chunk: Buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  /** The other buffer: while one is being written, lines are encoded into this one. */
  private spare: Buffer | null = null;
  /** The buffer a write is reading from. */
  private writing: Buffer | null = null;
  private readonly encoder = new TelemetryLineEncoder();

  /**
   * Encodes a checked record's line and newline at the chunk's end, into the open unit: straight
   * into the bytes (no string, nothing for the garbage collector), or through core's general encoder
   * for unusual records. Returns the bytes added; 0 for a record that is not JSON (see lastError).
   */
  encode(record: TelemetryEvent): number {
    let bytes: number;
    try {
      this.reserve(ENCODE_ROOM);
      const start = this.length;
      let end = this.encoder.encodeInto(record, this.chunk, start);
      if (end < 0 || end >= this.chunk.length) {
        // ASCII by construction (ensure_ascii escaping): one byte per character.
        const line = encodeTelemetryRecord(record);
        this.reserve(line.length + 1);
        end = start + latin1Write(this.chunk, line, start);
      }
      this.chunk[end] = 0x0a;
      this.length = end + 1;
      bytes = end + 1 - start;
    } catch (error) {
      this.lastError = (error as Error).message;
      return 0;
    }
    this.unitSession = record.session_id;
    this.unitCount++;
    this.unitBytes += bytes;
    return bytes;
  }

  /** Ends the open unit (its lines stay in the chunk, now part of the pending write). */
  closeUnit(): void {
    this.unitCount = 0;
    this.unitBytes = 0;
  }

  /** Forgets every encoded line (they were counted as lost). */
  clear(): void {
    this.length = 0;
    this.unitCount = 0;
    this.unitBytes = 0;
  }

  /** Drops the first `bytes` of the chunk (written or given up), keeping the lines after them. */
  consume(bytes: number): void {
    if (bytes < this.length) this.chunk.copy(this.chunk, 0, bytes, this.length);
    this.length -= bytes;
    this.shrinkIdle();
  }

  /**
   * Hands the chunk's first `bytes` to a write and goes on in the other buffer with the lines after
   * them (fewer than flushEveryEvents: a small copy), so encoding can go on during the write.
   */
  take(bytes: number): Buffer {
    const full = this.chunk;
    const rest = this.length - bytes;
    let next = this.spare;
    this.spare = null;
    if (next === null || next.length < rest + ENCODE_ROOM)
      next = Buffer.allocUnsafeSlow(Math.max(CHUNK_BYTES, rest + ENCODE_ROOM));
    if (rest > 0) full.copy(next, 0, bytes, this.length);
    this.chunk = next;
    this.length = rest;
    this.writing = full;
    return full.subarray(0, bytes);
  }

  /**
   * The write in flight was done again on this thread while the thread pool may still read its
   * buffer (the exit path): that buffer is never handed out again.
   */
  abandonWriting(): void {
    this.writing = null;
  }

  /** The write is over: its buffer becomes the spare one (unless a burst made it large). */
  release(): void {
    const done = this.writing;
    this.writing = null;
    if (done !== null && done.length <= KEEP_CHUNK_BYTES) this.spare = done;
    this.shrinkIdle();
  }

  /** Gives both buffers back while nothing is encoded or being written (a session closed); the next encode takes new ones. */
  shed(): void {
    if (this.length > 0 || this.writing !== null) return;
    this.chunk = NO_BYTES;
    this.spare = null;
  }

  /** Makes room for `bytes` more bytes after the chunk's content. */
  private reserve(bytes: number): void {
    const needed = this.length + bytes;
    if (needed <= this.chunk.length) return;
    const grown = Buffer.allocUnsafeSlow(Math.max(needed, CHUNK_BYTES, this.chunk.length * 2));
    this.chunk.copy(grown, 0, 0, this.length);
    this.chunk = grown;
  }

  /** A burst may have grown the buffer: give the memory back once it is empty. */
  private shrinkIdle(): void {
    if (this.length === 0 && this.chunk.length > KEEP_CHUNK_BYTES)
      this.chunk = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  }
}
