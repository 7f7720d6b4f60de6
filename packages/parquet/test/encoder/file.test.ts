import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DuckDBInstance } from "@duckdb/node-api";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Int64Column, splitBase } from "../../src/encoder/columns.js";
import { encodeParquet } from "../../src/encoder/file.js";

let dir = "";
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "stormlog-parquet-encoder-"));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function readBack(bytes: Uint8Array, sql = "SELECT * FROM t"): Promise<unknown[][]> {
  const path = join(dir, `f-${Math.random().toString(36).slice(2)}.parquet`);
  writeFileSync(path, bytes);
  sql = sql.replaceAll("$FILE", `'${path}'`);
  const instance = await DuckDBInstance.create(":memory:");
  const connection = await instance.connect();
  try {
    await connection.run(`CREATE VIEW t AS SELECT * FROM read_parquet('${path}')`);
    return (await connection.runAndReadAll(sql)).getRowsJS();
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

describe("encodeParquet", () => {
  it("writes int64 exactly: past 2^53, negative, from a base plus offsets, and nulls", async () => {
    const exact = new Int64Column(6);
    exact.setBigint(0, 2n ** 62n + 12_345n);
    exact.setBigint(1, -(2n ** 63n));
    exact.setBigint(2, 2n ** 63n - 1n);
    exact.setNumber(3, -123_456_789_012);
    exact.setNull(4);
    exact.setNumber(5, 2 ** 53);
    const base = 1_760_000_000_123_456_789n;
    const [hi, lo] = splitBase(base);
    const stamps = new Int64Column(6);
    const offsets = [0, 1, 4_294_967_295, 4_294_967_296, 2 ** 52 + 7, 9_007_199_254_740_991];
    offsets.forEach((offset, k) => {
      stamps.setOffset(k, hi, lo, offset);
    });
    const bytes = encodeParquet(
      [
        { name: "exact", type: "INT64", nullable: true, values: exact },
        { name: "timestamp_ns", type: "INT64", nullable: false, values: stamps },
        { name: "listed", type: "INT64", nullable: true, values: [1n, null, -1, 0, 2n ** 60n, null] },
      ],
      6,
      { createdBy: "test" },
    );
    const rows = await readBack(bytes);
    expect(rows.map((row) => row[0])).toEqual([
      2n ** 62n + 12_345n,
      -(2n ** 63n),
      2n ** 63n - 1n,
      -123_456_789_012n,
      null,
      2n ** 53n,
    ]);
    expect(rows.map((row) => row[1])).toEqual(offsets.map((offset) => base + BigInt(offset)));
    expect(rows.map((row) => row[2])).toEqual([1n, null, -1n, 0n, 2n ** 60n, null]);
    // Statistics let engines skip files: min and max of the timestamps.
    const stats = await readBack(
      bytes,
      "SELECT path_in_schema, stats_min_value, stats_max_value, stats_null_count FROM parquet_metadata($FILE) ORDER BY column_id",
    );
    expect(stats).toEqual([
      ["exact", String(-(2n ** 63n)), String(2n ** 63n - 1n), 1n],
      ["timestamp_ns", String(base), String(base + 9_007_199_254_740_991n), 0n],
      ["listed", "-1", String(2n ** 60n), 2n],
    ]);
  });

  it("writes text (dictionary-encoded), JSON, int32, doubles and booleans, with nulls", async () => {
    const phases = ["train", "train / forward", null, "train / forward", "é ✓ 𝄞", ""];
    const bytes = encodeParquet(
      [
        { name: "phase_path", type: "STRING", nullable: true, values: phases },
        {
          name: "evidence",
          type: "JSON",
          nullable: false,
          values: ['{"a": 1}', "[]", "{}", "1", "null", '"x"'],
        },
        {
          name: "device_id",
          type: "INT32",
          nullable: false,
          values: Int32Array.from([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 7]),
        },
        {
          name: "confidence",
          type: "DOUBLE",
          nullable: true,
          values: [0.5, null, -1e300, 0, 1.25, Number.NaN],
        },
        {
          name: "synthetic_end",
          type: "BOOLEAN",
          nullable: true,
          values: [true, false, null, true, true, false],
        },
      ],
      6,
      { createdBy: "test", metadata: { "stormlog.table": "test" } },
    );
    const rows = await readBack(
      bytes,
      "SELECT phase_path, evidence::VARCHAR, device_id, confidence, synthetic_end FROM t",
    );
    expect(rows.map((row) => row[0])).toEqual(phases);
    expect(rows.map((row) => row[1])).toEqual(['{"a": 1}', "[]", "{}", "1", "null", '"x"']);
    expect(rows.map((row) => row[2])).toEqual([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 7]);
    expect(rows.slice(0, 5).map((row) => row[3])).toEqual([0.5, null, -1e300, 0, 1.25]);
    expect(Number.isNaN(rows[5]![3])).toBe(true);
    expect(rows.map((row) => row[4])).toEqual([true, false, null, true, true, false]);
  });

  it("writes thousands of rows with long runs and many distinct values", async () => {
    const n = 20_000;
    const values = Array.from({ length: n }, (_, k) => (k % 3 === 0 ? null : `v${Math.floor(k / 7) % 500}`));
    const counters = new Int64Column(n);
    for (let k = 0; k < n; k++) {
      if (k % 11 === 0) counters.setNull(k);
      else counters.setNumber(k, k * 1_000_003);
    }
    const bytes = encodeParquet(
      [
        { name: "s", type: "STRING", nullable: true, values },
        { name: "c", type: "INT64", nullable: true, values: counters },
      ],
      n,
      { createdBy: "test" },
    );
    const rows = await readBack(
      bytes,
      "SELECT count(*), count(s), count(DISTINCT s), sum(c), count(c) FROM t",
    );
    const expectedSum = Array.from({ length: n }, (_, k) =>
      k % 11 === 0 ? 0n : BigInt(k * 1_000_003),
    ).reduce((a, b) => a + b, 0n);
    expect(rows[0]).toEqual([
      BigInt(n),
      BigInt(values.filter((v) => v !== null).length),
      BigInt(new Set(values.filter((v) => v !== null)).size),
      expectedSum,
      BigInt(n - Math.ceil(n / 11)),
    ]);
  });
});
