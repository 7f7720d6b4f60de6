import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  BLOCK_SIZE,
  CHUNK_FIRST,
  CHUNK_FULL,
  CHUNK_HEADER_SIZE,
  CHUNK_LAST,
  CHUNK_MIDDLE,
  crc32,
  LevelDbLogWriter,
  readLevelDbLog,
} from "../src/offline/leveldb-log.js";
import { decodeRecord, encodeRecord } from "../src/offline/schema.js";

function withDir<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), "stormlog-wandb-log-"));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The chunk types in file order, walking the blocks as a reader does. */
function chunkTypes(bytes: Buffer): number[] {
  const types: number[] = [];
  let offset = 7;
  while (offset < bytes.length) {
    const left = BLOCK_SIZE - (offset % BLOCK_SIZE);
    if (left < CHUNK_HEADER_SIZE) {
      offset += left;
      continue;
    }
    types.push(bytes.readUInt8(offset + 6));
    offset += CHUNK_HEADER_SIZE + bytes.readUInt16LE(offset + 4);
  }
  return types;
}

describe("W&B transaction log", () => {
  it("uses zlib's CRC-32", () => {
    expect(crc32(Buffer.from("123456789"))).toBe(0xcbf43926);
  });

  it("starts with :W&B, 0xBEE1 little-endian, version 0", () => {
    withDir((dir) => {
      const writer = new LevelDbLogWriter(join(dir, "a.wandb"));
      writer.close();
      expect([...readFileSync(join(dir, "a.wandb"))]).toEqual([0x3a, 0x57, 0x26, 0x42, 0xe1, 0xbe, 0x00]);
    });
  });

  it("splits records over blocks (first, middle, last) and reads them back", () => {
    withDir((dir) => {
      const path = join(dir, "b.wandb");
      const big = Buffer.alloc(3 * BLOCK_SIZE + 123, 7);
      const small = Buffer.from("hello");
      const writer = new LevelDbLogWriter(path);
      writer.append(small);
      writer.append(big);
      writer.append(small);
      writer.close();
      const records = readLevelDbLog(path);
      expect(records.map((record) => record.length)).toEqual([5, big.length, 5]);
      expect(Buffer.from(records[1] as Uint8Array).equals(big)).toBe(true);
      expect(chunkTypes(readFileSync(path))).toEqual([
        CHUNK_FULL,
        CHUNK_FIRST,
        CHUNK_MIDDLE,
        CHUNK_MIDDLE,
        CHUNK_LAST,
        CHUNK_FULL,
      ]);
    });
  });

  it("pads a block tail shorter than a chunk header with zeros", () => {
    withDir((dir) => {
      const path = join(dir, "c.wandb");
      const writer = new LevelDbLogWriter(path);
      // 7 (file header) + 7 + n leaves 3 bytes in the block: too few for a chunk header.
      writer.append(Buffer.alloc(BLOCK_SIZE - 7 - 7 - 3, 1));
      writer.append(Buffer.from("x"));
      writer.close();
      const bytes = readFileSync(path);
      expect([...bytes.subarray(BLOCK_SIZE - 3, BLOCK_SIZE)]).toEqual([0, 0, 0]);
      expect(readLevelDbLog(path).map((record) => record.length)).toEqual([BLOCK_SIZE - 17, 1]);
    });
  });

  it("encodes records with the field numbers of wandb_internal.proto", () => {
    // Record.exit = 18 (tag 0x92 0x01), RunExitRecord.exit_code = 1, runtime = 2.
    expect([...encodeRecord({ exit: { exit_code: 3, runtime: 4 } })]).toEqual([
      0x92, 0x01, 4, 0x08, 3, 0x10, 4,
    ]);
    // Record.history = 2, HistoryRecord.item = 1, HistoryItem.key = 1, value_json = 16 (tag 0x82 0x01).
    const bytes = encodeRecord({ history: { item: [{ key: "a", value_json: "1" }], step: { num: 5 } } });
    expect([...bytes]).toEqual([0x12, 13, 0x0a, 7, 0x0a, 1, 0x61, 0x82, 0x01, 1, 0x31, 0x12, 2, 0x08, 5]);
    expect(decodeRecord(bytes)).toEqual({
      history: { item: [{ key: "a", nested_key: [], value_json: "1" }], step: { num: 5 } },
    });
  });
});
