import { type JsonObject, stringifyJson } from "@stormlog/core";
import { markFloat } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import { type BoundaryEntry, BoundaryLog, TextScopeBoundary } from "../../src/input/boundary-log.js";

/** A boundary's fields as plain values (its parsed scope included), for comparing lists. */
function plain(entry: BoundaryEntry): Record<string, unknown> {
  return {
    timestampNs: `${entry.timestampNs}`,
    eventType: entry.eventType,
    scope: JSON.stringify(entry.scope, (_key, value: unknown) =>
      typeof value === "bigint" ? `${value}n` : value,
    ),
    line: entry.line,
    counters: [entry.allocated, entry.reserved, entry.used, entry.tensors, entry.total].map(String),
    deviceId: entry.deviceId,
    boundaryRead: entry.boundaryRead,
  };
}

const scopeText = (id: number, depth: number): string =>
  JSON.stringify({ action: "enter", depth, name: `p${id}`, path: ["train", `p${id}`], scope_id: `s:${id}` });

/** Reads a boundary into `log` as the scan's fast reader hands it over: the scope's bytes inside a line. */
function pushLine(log: BoundaryLog, head: number, tail: number, i: number): string {
  const scope = scopeText(i, 1 + (i % 3));
  const line = Buffer.from(`{"x": 1, "metadata": {"phase_scope": ${scope}}}`, "latin1");
  const start = line.indexOf(scope);
  log.pushRead(
    head,
    tail,
    i % 2 === 1,
    i % 5 === 0,
    i + 1,
    1000 + i,
    2000 + i,
    i % 7 === 0 ? Number.NaN : 3000 + i,
    i % 4 === 0 ? Number.NaN : i,
    8_000_000_000,
    i % 3,
    line,
    start,
    start + scope.length,
  );
  return scope;
}

describe("BoundaryLog: a rank's boundaries as the index stores them", () => {
  it("lists read boundaries exactly, their timestamps from the reader's split (seconds and nanoseconds)", () => {
    const log = new BoundaryLog(4);
    const splits: [number, number][] = [
      [0, 0],
      [0, 999_999_999],
      [1_760_000_000, 5],
      [1_760_000_000, 123_456_789],
      [999_999_999_999_999, 0],
      [1, 0],
      [10, 100_000_000],
      [0, 10],
    ];
    const scopes: string[] = [];
    for (let i = 0; i < 40; i++) {
      const [head, tail] = splits[i % splits.length]!;
      scopes.push(pushLine(log, head, tail, i));
    }
    // The index's text: each timestamp's digits as Python prints the integer (no leading zeros), then its scope.
    const digits = (head: number, tail: number): string => `${BigInt(head) * 1_000_000_000n + BigInt(tail)}`;
    expect(Buffer.from(log.encoded().text).toString("latin1")).toBe(
      scopes.map((scope, i) => `${digits(...splits[i % splits.length]!)}${scope}`).join(""),
    );
    const listed = log.list();
    expect(listed).toHaveLength(40);
    listed.forEach((entry, i) => {
      const [head, tail] = splits[i % splits.length]!;
      expect(entry).toBeInstanceOf(TextScopeBoundary);
      expect(entry.timestampNs).toBe(BigInt(head) * 1_000_000_000n + BigInt(tail));
      expect(entry.eventType).toBe(i % 2 === 1 ? "phase_exit" : "phase_enter");
      expect(entry.scopeJson).toBe(scopes[i]);
      expect(entry.scope).toEqual(JSON.parse(scopes[i]!));
      expect(entry.boundaryRead).toBe(i % 5 === 0);
      expect(entry.line).toBe(i + 1);
      expect(Number.isNaN(entry.used)).toBe(i % 7 === 0);
      expect(Number.isNaN(entry.tensors)).toBe(i % 4 === 0);
      expect(entry.deviceId).toBe(i % 3);
    });
    // Each call makes the objects anew (a rank's are dropped once it is analysed).
    expect(log.list()[0]).not.toBe(listed[0]);
    expect(log.list().map(plain)).toEqual(listed.map(plain));
  });

  it("keeps boundaries given whole as given, and reads every kind back from its index form", () => {
    const log = new BoundaryLog();
    // A long integer and a float written as 1.0: exact only through the lossless codec.
    const exactScope: JsonObject = { name: "big", count: 2n ** 60n, ratio: 1 };
    markFloat(exactScope, "ratio");
    const given: BoundaryEntry[] = [
      {
        timestampNs: 1_760_000_000_000_000_001n,
        eventType: "phase_enter",
        scope: { name: "plain", path: ["é", "ü"] },
        scopeJson: null,
        line: 3,
        allocated: 1,
        reserved: 2,
        used: Number.NaN,
        tensors: 4,
        total: Number.NaN,
        deviceId: 0,
        boundaryRead: true,
      },
      {
        timestampNs: -5n,
        eventType: "phase_exit",
        scope: exactScope,
        scopeJson: null,
        line: 4,
        allocated: Number.POSITIVE_INFINITY,
        reserved: 2,
        used: 3,
        tensors: Number.NaN,
        total: 9,
        deviceId: 1,
        boundaryRead: false,
      },
    ];
    pushLine(log, 1_760_000_000, 7, 0);
    log.push(given[0]!);
    pushLine(log, 1_760_000_001, 8, 1);
    log.push(given[1]!);
    const listed = log.list();
    expect(listed[1]).toBe(given[0]);
    expect(listed[3]).toBe(given[1]);

    const { columns, text } = log.encoded();
    expect(columns).toHaveLength(4 * 10);
    const stored = Buffer.concat([Buffer.from("prefix"), text, Buffer.from("suffix")]);
    const read = BoundaryLog.adopt(Float64Array.from(columns), stored, 6, 6 + text.length);
    expect(read).not.toBeNull();
    const back = read!.list();
    // Stored counters are finite or NaN (null), as the index keeps them.
    const expected = listed.map(plain);
    expected[3]!.counters = ["NaN", "2", "3", "NaN", "9"];
    expect(back.map(plain)).toEqual(expected);
    expect(back[1]!.scopeJson).toBeNull();
    expect(back[3]!.scope).toEqual(exactScope);
    expect(stringifyJson(back[3]!.scope)).toBe(stringifyJson(exactScope));
    expect(back[0]!.scopeJson).toBe(listed[0]!.scopeJson);
  });

  it("rejects index bytes that do not read as written", () => {
    const log = new BoundaryLog();
    for (let i = 0; i < 3; i++) pushLine(log, 1_760_000_000, i, i);
    const { columns, text } = log.encoded();
    const bytes = Buffer.from(text);
    expect(BoundaryLog.adopt(Float64Array.from(columns), bytes, 0, bytes.length)).not.toBeNull();
    // A text cut short, a timestamp that is not digits, offsets that run backwards.
    expect(BoundaryLog.adopt(Float64Array.from(columns), bytes, 0, bytes.length - 1)).toBeNull();
    const garbled = Buffer.from(bytes);
    garbled[3] = 0x78;
    expect(BoundaryLog.adopt(Float64Array.from(columns), garbled, 0, garbled.length)).toBeNull();
    const backwards = Float64Array.from(columns);
    backwards[8 * 3 + 1] = 1;
    expect(BoundaryLog.adopt(backwards, bytes, 0, bytes.length)).toBeNull();
    // A parsed scope whose JSON is damaged.
    const whole = new BoundaryLog();
    whole.push({ ...log.list()[0]!, scope: { a: 1 }, scopeJson: null });
    const parts = whole.encoded();
    const damaged = Buffer.from(parts.text);
    damaged[damaged.length - 1] = 0x20;
    expect(BoundaryLog.adopt(Float64Array.from(parts.columns), damaged, 0, damaged.length)).toBeNull();
  });

  it("copies what it read back before adding to it: the index's bytes stay as they are", () => {
    const log = new BoundaryLog();
    for (let i = 0; i < 5; i++) pushLine(log, 1_760_000_000, i, i);
    const { columns, text } = log.encoded();
    const bytes = Buffer.from(text);
    const before = Buffer.from(bytes);
    const stored = Float64Array.from(columns);
    const storedBefore = Float64Array.from(stored);
    const read = BoundaryLog.adopt(stored, bytes, 0, bytes.length)!;
    pushLine(read, 1_760_000_009, 9, 9);
    expect(bytes.equals(before)).toBe(true);
    expect(stored).toEqual(storedBefore);
    pushLine(log, 1_760_000_009, 9, 9);
    expect(read.list().map(plain)).toEqual(log.list().map(plain));
  });
});
