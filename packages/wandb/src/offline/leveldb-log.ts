/**
 * W&B's transaction log file (`.wandb`): a 7-byte header (`:W&B`, magic 0xBEE1 little-endian,
 * version 0), then LevelDB log format records in 32 KiB blocks: each chunk has a CRC-32 (IEEE) of its
 * type byte followed by its data, a 16-bit little-endian length and a type (full, first, middle,
 * last); a block's tail shorter than a chunk header is zero padding.
 */
import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";
import { readRegularFileSync } from "@stormlog/sink/internal";
import { WandbOfflineRunError } from "../errors.js";

export const BLOCK_SIZE = 32 * 1024;
export const CHUNK_HEADER_SIZE = 7;
export const FILE_HEADER = Buffer.from([0x3a, 0x57, 0x26, 0x42, 0xe1, 0xbe, 0x00]); // ":W&B", 0xBEE1 LE, 0

export const CHUNK_FULL = 1;
export const CHUNK_FIRST = 2;
export const CHUNK_MIDDLE = 3;
export const CHUNK_LAST = 4;

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32 (IEEE, zlib's `crc32`) of `data`, continuing from `crc`. */
export function crc32(data: Uint8Array, crc = 0): number {
  let c = ~crc >>> 0;
  for (let i = 0; i < data.length; i++)
    c = (CRC_TABLE[(c ^ (data[i] as number)) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}

/** The checksum of a chunk: CRC-32 of the type byte, then the data. */
export function chunkChecksum(type: number, data: Uint8Array): number {
  return crc32(data, crc32(Uint8Array.of(type)));
}

/** Writes records into a `.wandb` file, each record flushed to disk as written. */
export class LevelDbLogWriter {
  private readonly fd: number;
  private offset = 0;

  constructor(readonly path: string) {
    this.fd = openSync(path, "wx");
    this.write(FILE_HEADER);
  }

  private write(bytes: Uint8Array): void {
    let done = 0;
    while (done < bytes.length) done += writeSync(this.fd, bytes, done, bytes.length - done);
    this.offset += bytes.length;
  }

  private chunk(type: number, data: Uint8Array): void {
    const header = Buffer.alloc(CHUNK_HEADER_SIZE);
    header.writeUInt32LE(chunkChecksum(type, data), 0);
    header.writeUInt16LE(data.length, 4);
    header.writeUInt8(type, 6);
    this.write(header);
    if (data.length > 0) this.write(data);
  }

  /** Appends one record (split into chunks across blocks as needed). */
  append(record: Uint8Array): void {
    let left = BLOCK_SIZE - (this.offset % BLOCK_SIZE);
    if (left < CHUNK_HEADER_SIZE) {
      this.write(new Uint8Array(left));
      left = BLOCK_SIZE;
    }
    if (record.length + CHUNK_HEADER_SIZE <= left) {
      this.chunk(CHUNK_FULL, record);
      return;
    }
    let used = left - CHUNK_HEADER_SIZE;
    this.chunk(CHUNK_FIRST, record.subarray(0, used));
    while (record.length - used > BLOCK_SIZE - CHUNK_HEADER_SIZE) {
      this.chunk(CHUNK_MIDDLE, record.subarray(used, used + BLOCK_SIZE - CHUNK_HEADER_SIZE));
      used += BLOCK_SIZE - CHUNK_HEADER_SIZE;
    }
    this.chunk(CHUNK_LAST, record.subarray(used));
  }

  /** Flushes to disk and closes the file. */
  close(): void {
    fsyncSync(this.fd);
    closeSync(this.fd);
  }
}

/**
 * The bytes of a file of a run, opened without waiting on a FIFO or device (their read would never
 * end): one that is not a regular file is `fail`ed as such.
 */
export function readRunFile(path: string, fail: (message: string) => never): Buffer {
  try {
    return readRegularFileSync(path, null);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EFTYPE" || code === "EISDIR") return fail(`${path} is not a regular file`);
    throw error;
  }
}

/** Reads every record of a `.wandb` file, checking the header, each chunk's CRC and the chunk sequence. */
export function readLevelDbLog(path: string): Uint8Array[] {
  const fail = (message: string): never => {
    throw new WandbOfflineRunError(path, message);
  };
  const bytes = readRunFile(path, fail);
  if (bytes.length < FILE_HEADER.length || !bytes.subarray(0, FILE_HEADER.length).equals(FILE_HEADER)) {
    fail("not a W&B transaction log (header is not ':W&B', 0xBEE1, version 0)");
  }
  const records: Uint8Array[] = [];
  let offset = FILE_HEADER.length;
  let pending: Uint8Array[] | null = null;
  while (offset < bytes.length) {
    const left = BLOCK_SIZE - (offset % BLOCK_SIZE);
    if (left < CHUNK_HEADER_SIZE) {
      if (bytes.subarray(offset, offset + left).some((byte) => byte !== 0))
        fail(`non-zero block padding at ${offset}`);
      offset += left;
      continue;
    }
    if (offset + CHUNK_HEADER_SIZE > bytes.length) fail(`truncated chunk header at ${offset}`);
    const checksum = bytes.readUInt32LE(offset);
    const length = bytes.readUInt16LE(offset + 4);
    const type = bytes.readUInt8(offset + 6);
    const start = offset + CHUNK_HEADER_SIZE;
    if (start + length > bytes.length) fail(`truncated chunk at ${offset}`);
    if (length + CHUNK_HEADER_SIZE > left) fail(`chunk at ${offset} crosses a block boundary`);
    const data = bytes.subarray(start, start + length);
    if (chunkChecksum(type, data) !== checksum) fail(`bad CRC in the chunk at ${offset}`);
    offset = start + length;
    if (type === CHUNK_FULL) {
      if (pending !== null) fail(`a full chunk at ${start - CHUNK_HEADER_SIZE} inside a split record`);
      records.push(data);
    } else if (type === CHUNK_FIRST) {
      if (pending !== null) fail(`a first chunk at ${start - CHUNK_HEADER_SIZE} inside a split record`);
      pending = [data];
    } else if (type === CHUNK_MIDDLE || type === CHUNK_LAST) {
      if (pending === null) fail(`a ${type === CHUNK_LAST ? "last" : "middle"} chunk without a first one`);
      (pending as Uint8Array[]).push(data);
      if (type === CHUNK_LAST) {
        records.push(Buffer.concat(pending as Uint8Array[]));
        pending = null;
      }
    } else {
      fail(`unknown chunk type ${type} at ${start - CHUNK_HEADER_SIZE}`);
    }
  }
  if (pending !== null) fail("the last record is cut off (no last chunk)");
  return records;
}
