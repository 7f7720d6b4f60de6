import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  decodeTelemetryLine,
  encodeTelemetryRecord,
  type JsonObject,
  type TelemetryRecord,
} from "@stormlog/core";
import { seededRandom } from "@stormlog/phases/internal";
import { describe, expect, it, vi } from "vitest";
import { BASE_NS, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { CanonicalLineReader } from "../../src/input/fast-line.js";

const FIXTURES = join(import.meta.dirname, "../../../../fixtures/golden");

/** Reads `line` with the fast reader; null when it declines. */
function fastRead(line: string, reader = new CanonicalLineReader()): CanonicalLineReader | null {
  const bytes = Buffer.from(`${line}\nNEXT`, "utf8");
  return reader.read(bytes, 0, Buffer.byteLength(line)) ? reader : null;
}

function decodeOrNull(line: string): TelemetryRecord | null {
  try {
    return decodeTelemetryLine(line);
  } catch {
    return null;
  }
}

const orNaN = (value: number | null | undefined): number =>
  value === null || value === undefined ? Number.NaN : value;

/** Every field the fast reader exposes equals the full decoder's. */
function expectSame(reader: CanonicalLineReader, decoded: TelemetryRecord, line: string): void {
  const tensors = decoded.metadata.tfjs_num_tensors;
  const expected = {
    allocated: orNaN(decoded.allocator_allocated_bytes),
    reserved: orNaN(decoded.allocator_reserved_bytes),
    active: orNaN(decoded.allocator_active_bytes),
    inactive: orNaN(decoded.allocator_inactive_bytes),
    change: orNaN(decoded.allocator_change_bytes),
    used: orNaN(decoded.device_used_bytes),
    free: orNaN(decoded.device_free_bytes),
    total: orNaN(decoded.device_total_bytes),
    deviceId: decoded.device_id,
    pid: decoded.pid,
    rank: decoded.rank,
    localRank: decoded.local_rank,
    worldSize: decoded.world_size,
    samplingIntervalMs: decoded.sampling_interval_ms,
    eventType: decoded.event_type,
    collector: decoded.collector,
    host: decoded.host,
    jobId: decoded.job_id,
    sessionId: "session_id" in decoded ? decoded.session_id : undefined,
    timestampNs: decoded.timestamp_ns,
    context: decoded.context,
    tensors: typeof tensors === "number" ? tensors : Number.NaN,
  };
  const actual = {
    allocated: reader.allocated,
    reserved: reader.reserved,
    active: reader.active,
    inactive: reader.inactive,
    change: reader.change,
    used: reader.used,
    free: reader.free,
    total: reader.total,
    deviceId: reader.deviceId,
    pid: reader.pid,
    rank: reader.rank,
    localRank: reader.localRank,
    worldSize: reader.worldSize,
    samplingIntervalMs: reader.samplingIntervalMs,
    eventType: reader.eventType,
    collector: reader.collector,
    host: reader.host,
    jobId: reader.jobId,
    sessionId: reader.sessionId,
    timestampNs: reader.timestampNs(),
    context: reader.context(),
    tensors: reader.tensors,
  };
  expect(actual, line).toEqual(expected);
  const metadata = JSON.parse(line.slice(reader.metadataStart, reader.metadataEnd)) as JsonObject;
  const plain = JSON.parse(JSON.stringify(decoded.metadata)) as JsonObject;
  expect(metadata, line).toEqual(plain);
  // The top-level phase_scope's own text, which the scan parses alone and the index stores as is.
  const scope =
    reader.scopeStart < 0 ? undefined : JSON.parse(line.slice(reader.scopeStart, reader.scopeEnd));
  expect(scope, line).toEqual(plain.phase_scope);
}

const METADATA: JsonObject[] = [
  {},
  { tfjs_num_tensors: 42 },
  { tfjs_num_tensors: 0, backend: "webgl" },
  { nested: { tfjs_num_tensors: 7 }, list: [1, [2, []], {}], flag: true, none: null, neg: -3 },
  {
    phase_scope: {
      action: "enter",
      path: ["train", "forward"],
      depth: 2,
      scope_id: "s:1",
      parent_scope_id: null,
      sequence: 1,
      thread_id: 1,
      thread_name: "main",
      name: "forward",
    },
  },
  { text: 'quote " backslash \\ tab \t newline \n unicode \u00e9 \u2028 end', tfjs_num_tensors: 5 },
  { phase_scope: "plain", tfjs_num_tensors: 1 },
  { phase_scope: {}, after: 1 },
  { phase_scope: [], z: { phase_scope: { deep: true } } },
  { a: { phase_scope: { x: 1 } }, phase_scope: { action: "exit", path: [] }, zz: [{ phase_scope: 2 }] },
  { tfjs_num_tensors: "12" },
  { tfjs_num_tensors: [1] },
  { tfjs_num_tensors: 3, later: { deep: [{ x: "y" }] } },
];

describe("CanonicalLineReader agrees with decodeTelemetryLine", () => {
  it("reads canonical lines exactly (random values, every metadata shape)", () => {
    const next = seededRandom(7);
    let read = 0;
    for (let i = 0; i < 400; i++) {
      const total = next() < 0.2 ? null : Math.floor(next() * 2 ** 40);
      const used = total === null ? Math.floor(next() * 2 ** 45) : Math.floor(next() * total);
      const worldSize = 1 + Math.floor(next() * 64);
      const event = record(
        ["sample", "phase_enter", "start", "allocation", "warning"][i % 5]!,
        BASE_NS + BigInt(Math.floor(next() * 1e15)),
        {
          allocator_allocated_bytes: Math.floor(next() * 2 ** 52),
          allocator_reserved_bytes: Math.floor(next() * 2 ** 33),
          allocator_active_bytes: next() < 0.5 ? null : Math.floor(next() * 1000),
          allocator_change_bytes: Math.floor((next() - 0.5) * 2 ** 30),
          device_used_bytes: used,
          device_total_bytes: total,
          device_free_bytes: total === null || next() < 0.3 ? null : total - used,
          device_id: next() < 0.2 ? -1 : Math.floor(next() * 8),
          pid: next() < 0.1 ? -1 : Math.floor(next() * 100000),
          rank: Math.floor(next() * worldSize),
          local_rank: 0,
          world_size: worldSize,
          job_id: next() < 0.3 ? null : `job-${i}`,
          context: next() < 0.3 ? null : next() < 0.5 ? "" : `Context ${i}`,
          metadata: METADATA[i % METADATA.length]!,
          timestamp_ns: next() < 0.05 ? BigInt(Math.floor(next() * 1000)) : BASE_NS + BigInt(i),
        },
      );
      const line = encodeTelemetryRecord(event);
      const decoded = decodeTelemetryLine(line);
      const reader = fastRead(line);
      expect(reader, line).not.toBeNull();
      expectSame(reader!, decoded, line);
      read++;
    }
    expect(read).toBe(400);
  });

  it("notes the last of duplicate top-level phase_scope keys, as JSON.parse keeps it", () => {
    const line = encodeTelemetryRecord(
      record("phase_exit", BASE_NS, { metadata: { phase_scope: { name: "first" }, zz: 1 } }),
    ).replace('"zz": 1', '"phase_scope" : [ "second" , {"phase_scope": 3} ] ');
    const reader = fastRead(line);
    expect(reader, line).not.toBeNull();
    expect(line.slice(reader!.scopeStart, reader!.scopeEnd)).toBe('[ "second" , {"phase_scope": 3} ]');
    expect(fastRead(encodeTelemetryRecord(record("phase_exit", BASE_NS, { metadata: {} })))!.scopeStart).toBe(
      -1,
    );
  });

  it("reads the Python reference's golden sink lines like the decoder", () => {
    let read = 0;
    for (const set of ["cross-rank", "python-sink"]) {
      for (const name of readdirSync(join(FIXTURES, set)).sort().slice(0, 6)) {
        const dir = set === "python-sink" ? join(FIXTURES, set, name, "sink") : join(FIXTURES, set, name);
        for (const file of readdirSync(dir).filter((f) => f.endsWith(".jsonl"))) {
          for (const line of readFileSync(join(dir, file), "utf8").split("\n")) {
            if (line.trim() === "") continue;
            const decoded = decodeOrNull(line);
            const reader = fastRead(line);
            if (reader === null) continue;
            expect(decoded, line).not.toBeNull();
            expectSame(reader, decoded!, line);
            read++;
          }
        }
      }
    }
    expect(read).toBeGreaterThan(1000);
  });

  it("reads each line's strings, not the previous line's, when one reader reads them all", () => {
    const reader = new CanonicalLineReader();
    const hosts = [
      "node-0",
      "node-0",
      "node-01",
      "node-1",
      "node-",
      "node-1",
      "n",
      "node-1",
      "node-0",
      "node-01",
    ];
    // More event types than a slot remembers, and some again after they were forgotten.
    const types = [
      "sample",
      "phase_enter",
      "sample",
      "phase_exit",
      "start",
      "warning",
      "sample",
      "stop",
      "sample",
    ];
    hosts.forEach((host, i) => {
      const line = encodeTelemetryRecord(
        record(types[i % types.length]!, BASE_NS + BigInt(i), {
          host,
          job_id: i % 3 === 0 ? null : `job-${i % 2}`,
          session_id: `s-${i >> 1}`,
          collector: i < 4 ? "stormlog.tfjs_tracker" : "stormlog.tfjs_tracker2",
          device_used_bytes: 100,
        }),
      );
      expect(fastRead(line, reader), line).toBe(reader);
      expectSame(reader, decodeTelemetryLine(line), line);
    });
  });

  it("declines a line with any byte of any top-level key changed", () => {
    const line = encodeTelemetryRecord(
      record("sample", BASE_NS, { device_used_bytes: 100, device_total_bytes: 1000, metadata: { a: 1 } }),
    );
    expect(fastRead(line)).not.toBeNull();
    let changed = 0;
    for (const match of line.matchAll(/"([a-z_]+)": /g)) {
      // Keys inside the metadata are the metadata's own: any name is fine there.
      if (match[1] === "a") continue;
      for (let i = match.index + 1; i < match.index + 1 + match[1]!.length; i++) {
        const other = line[i] === "x" ? "y" : "x";
        const mutated = `${line.slice(0, i)}${other}${line.slice(i + 1)}`;
        expect(fastRead(mutated), mutated).toBeNull();
        changed++;
      }
    }
    expect(changed).toBeGreaterThan(200);
  });

  it("declines what it does not read exactly, and never accepts a line the decoder rejects", () => {
    const line = encodeTelemetryRecord(
      record("sample", BASE_NS, {
        device_used_bytes: 100,
        device_total_bytes: 1000,
        metadata: { tfjs_num_tensors: 3 },
      }),
    );
    const variants: [string, string][] = [
      ["float counter", line.replace('"allocator_allocated_bytes": 0', '"allocator_allocated_bytes": 0.0')],
      ["exponent counter", line.replace('"device_used_bytes": 100', '"device_used_bytes": 1e2')],
      ["compact separators", line.replaceAll(", ", ",")],
      ["escaped host", line.replace('"host": "node-0"', '"host": "node\\u002d0"')],
      ["non-ASCII host", line.replace('"host": "node-0"', '"host": "nöde-0"')],
      ["leading-zero timestamp", line.replace(`"timestamp_ns": ${BASE_NS}`, `"timestamp_ns": 0${BASE_NS}`)],
      ["used above total", line.replace('"device_used_bytes": 100', '"device_used_bytes": 10000')],
      ["negative count", line.replace('"allocator_reserved_bytes": 0', '"allocator_reserved_bytes": -1')],
      ["unclosed metadata", line.replace('{"tfjs_num_tensors": 3}', '{"tfjs_num_tensors": 3')],
      ["NaN in metadata", line.replace('{"tfjs_num_tensors": 3}', '{"tfjs_num_tensors": NaN}')],
      ["trailing garbage", `${line} x`],
      ["rank at world size", line.replace('"rank": 0', '"rank": 1')],
      ["blank-edged host", line.replace('"host": "node-0"', '"host": " node-0"')],
      ["escaped tensors key", line.replace('"tfjs_num_tensors"', '"tfjs\\u005fnum_tensors"')],
      ["float in metadata", line.replace('{"tfjs_num_tensors": 3}', '{"tfjs_num_tensors": 3, "ratio": 0.5}')],
      ["schema v4", line.replace('"schema_version": 3', '"schema_version": 4')],
      ["missing session", line.replace(/"session_id": "[^"]*", /, "")],
      ["empty line", ""],
    ];
    for (const [label, variant] of variants) {
      expect(variant, label).not.toBe(line);
      const reader = fastRead(variant);
      const decoded = decodeOrNull(variant);
      if (reader !== null) {
        // Accepted: only when the decoder reads the very same values.
        expect(decoded, label).not.toBeNull();
        expectSame(reader, decoded!, variant);
      }
      if (decoded === null) expect(reader, label).toBeNull();
    }
    // The inexact-metadata flag sends float-bearing metadata to the exact parser.
    expect(fastRead(variants[14]![1])?.metadataInexact).toBe(true);
    expect(fastRead(line)?.metadataInexact).toBe(false);
  });

  it("reads a trailing carriage return and whitespace like the decoder", () => {
    const line = encodeTelemetryRecord(record("sample", BASE_NS, { metadata: { tfjs_num_tensors: 9 } }));
    for (const variant of [`${line} `, `${line}\t`, `${line}\r`]) {
      const reader = fastRead(variant);
      expect(reader).not.toBeNull();
      expectSame(reader!, decodeTelemetryLine(variant), variant);
    }
  });
});

/** Every field `read` fills, for comparing two readers (NaN and -0 compare as themselves). */
function fieldsOf(reader: CanonicalLineReader): unknown[] {
  return [
    reader.allocated,
    reader.reserved,
    reader.active,
    reader.inactive,
    reader.change,
    reader.used,
    reader.free,
    reader.total,
    reader.deviceId,
    reader.pid,
    reader.rank,
    reader.localRank,
    reader.worldSize,
    reader.samplingIntervalMs,
    reader.tsHead,
    reader.tsTail,
    reader.eventType,
    reader.collector,
    reader.host,
    reader.jobId,
    reader.sessionId,
    reader.contextStart,
    reader.contextEnd,
    reader.metadataStart,
    reader.metadataEnd,
    reader.tensors,
    reader.metadataInexact,
    reader.metadataEmpty,
    reader.scopeStart,
    reader.scopeEnd,
    reader.boundaryRead,
  ];
}

/** The private full read, spied on: how many lines a reader did not read as one before. */
const fullReads = () =>
  vi.spyOn(CanonicalLineReader.prototype as unknown as { readFull: () => boolean }, "readFull");

/**
 * Lines of a few writers: the same strings line after line, numbers that change (length, sign, null),
 * metadata of a few shapes, as encodeTelemetryRecord writes them, with a device id written by hand
 * the way only another writer would (-0).
 */
function writerLines(seed: number, count: number): string[] {
  const next = seededRandom(seed);
  const pick = <T>(values: readonly T[]): T => values[Math.floor(next() * values.length)]!;
  const big = (): number => Math.floor(next() * 2 ** (1 + Math.floor(next() * 52)));
  const lines: string[] = [];
  // A run of lines shares its strings and its metadata's keys, as a writer's samples do.
  let run = 0;
  let writer = 0;
  let eventType = "sample";
  let context: string | null = null;
  let shape = 0;
  for (let i = 0; i < count; i++) {
    if (run-- <= 0) {
      run = 5 + Math.floor(next() * 40);
      writer = next() < 0.3 ? 1 : 0;
      eventType = next() < 0.8 ? "sample" : pick(["start", "warning"]);
      context = pick([null, "Collected telemetry sample.", ""]);
      shape = Math.floor(next() * 8);
    }
    const total = next() < 0.1 ? null : 2 ** 52;
    const worldSize = writer === 0 ? 8 : 64;
    const metadata: JsonObject[] = [
      { tfjs_num_tensors: Math.floor(next() * 10 ** Math.floor(next() * 15)) },
      { tfjs_num_tensors: 0 },
      { backend: "tensorflow", tfjs_num_tensors: Math.floor(next() * 500) },
      { tfjs_num_tensors: 1.5 },
      { tfjs_num_tensors: 1234567890123456 },
      {},
      // A phase boundary's scope: its ids, sequence and depth change from line to line.
      {
        phase_scope: {
          action: "enter",
          depth: 1 + Math.floor(next() * 3),
          name: "forward",
          parent_scope_id:
            next() < 0.2 ? null : `s-a:${Math.floor(next() * 10 ** (1 + Math.floor(next() * 6)))}`,
          path: ["train", "forward"],
          scope_id: `s-a:${Math.floor(next() * 10 ** (1 + Math.floor(next() * 6)))}`,
          sequence: Math.floor(next() * 10 ** (1 + Math.floor(next() * 14))),
          thread_id: pick([1, 2, 40012]),
          thread_name: "main",
        },
        tfjs_num_tensors: Math.floor(next() * 500),
      },
      // Numbers in keys (constant), nested values, negative and long integers, floats, escapes.
      {
        layer12: { count: -Math.floor(next() * 1000), big: Math.floor(next() * 2 ** 53), ratio: next() },
        ids: [`batch-${Math.floor(next() * 99)}`, Math.floor(next() * 7), "v2.10"],
        note: `x\u0031y ${Math.floor(next() * 100)}`,
        tfjs_num_tensors: Math.floor(next() * 50),
      },
    ];
    let line = encodeTelemetryRecord(
      record(eventType, BASE_NS + BigInt(big()), {
        session_id: writer === 0 ? "s-a" : "s-b",
        host: writer === 0 ? "node-0" : "node-17",
        job_id: writer === 0 ? null : "job-1",
        context,
        allocator_allocated_bytes: big(),
        allocator_reserved_bytes: big(),
        allocator_active_bytes: next() < 0.5 ? null : big(),
        allocator_inactive_bytes: next() < 0.5 ? null : big(),
        allocator_change_bytes: next() < 0.3 ? 0 : (next() < 0.5 ? -1 : 1) * big(),
        device_used_bytes: total === null ? big() : Math.floor(next() * total),
        device_total_bytes: total,
        device_free_bytes: total === null || next() < 0.3 ? null : Math.floor(next() * 2 ** 40),
        device_id: pick([0, 1, -1, 12]),
        pid: pick([-1, 0, 7, 40012]),
        rank: Math.floor(next() * worldSize),
        local_rank: Math.floor(next() * worldSize),
        world_size: worldSize,
        sampling_interval_ms: pick([10, 250]),
        metadata: metadata[shape]!,
      }),
    );
    if (next() < 0.05) line = line.replace('"device_id": 0,', '"device_id": -0,');
    lines.push(line);
  }
  return lines;
}

/**
 * Reads `changed` with `reader` right after `base` (which keeps a template that `changed` is read by
 * where it can be) and with a fresh reader: both accept it or both decline it, reading the same.
 * True when they accepted it.
 */
function readsLikeFresh(reader: CanonicalLineReader, base: string, changed: string): boolean {
  expect(fastRead(base, reader)).toBe(reader);
  const fresh = fastRead(changed);
  const templated = fastRead(changed, reader);
  expect(templated === null, changed).toBe(fresh === null);
  if (fresh === null || templated === null) return false;
  // Positions included: the context, the metadata and the scope are this line's own bytes.
  expect(fieldsOf(templated), changed).toEqual(fieldsOf(fresh));
  return true;
}

describe("CanonicalLineReader reads a line like the one before it", () => {
  it("reads what the decoder reads, line after line, with most lines read as one before them", () => {
    const spy = fullReads();
    const reader = new CanonicalLineReader();
    const lines = writerLines(11, 3000);
    for (const line of lines) {
      expect(fastRead(line, reader), line).toBe(reader);
      expectSame(reader, decodeTelemetryLine(line), line);
    }
    // The same lines after the context's and the metadata's: their positions move with the numbers.
    expect(spy.mock.calls.length).toBeLessThan(lines.length / 2);
    spy.mockRestore();
  });

  it("accepts and reads a changed line exactly as a reader that never saw a line before", () => {
    const next = seededRandom(23);
    const tokens = [
      "0",
      "7",
      "-",
      ".",
      "e",
      "E",
      " ",
      "n",
      "null",
      "-0",
      "00",
      "1e3",
      '"',
      ",",
      "}",
      "{",
      "\\",
      "é",
    ];
    tokens.push("9".repeat(17), "9007199254740993", "123456789012345678901234567");
    const reader = new CanonicalLineReader();
    let changed = 0;
    let accepted = 0;
    for (const line of writerLines(5, 600)) {
      for (let round = 0; round < 6; round++) {
        // The unchanged line keeps a template for the changed one.
        expect(fastRead(line, reader)).toBe(reader);
        let mutated = line;
        for (let edit = 0; edit < 1 + Math.floor(next() * 3); edit++) {
          const at = Math.floor(next() * mutated.length);
          const token = tokens[Math.floor(next() * tokens.length)]!;
          const kind = next();
          if (kind < 0.4) mutated = mutated.slice(0, at) + token + mutated.slice(at + 1);
          else if (kind < 0.7) mutated = mutated.slice(0, at) + token + mutated.slice(at);
          else mutated = mutated.slice(0, at) + mutated.slice(at + 1);
        }
        if (mutated === line) continue;
        changed++;
        const fresh = fastRead(mutated);
        const templated = fastRead(mutated, reader);
        expect(templated === null, mutated).toBe(fresh === null);
        if (fresh === null || templated === null) continue;
        accepted++;
        expect(fieldsOf(templated), mutated).toEqual(fieldsOf(fresh));
      }
    }
    expect(changed).toBeGreaterThan(3000);
    expect(accepted).toBeGreaterThan(150);
  });

  it("reads numbers of every length in every kind of slot as a fresh reader does (the kernel's digit blocks)", () => {
    const next = seededRandom(31);
    const digits = (length: number): string =>
      Array.from({ length }, (_, i) =>
        String(i === 0 ? 1 + Math.floor(next() * 9) : Math.floor(next() * 10)),
      ).join("");
    const base = writerLines(3, 50)
      .find((line) => /"metadata": \{[^{}]*\}, "pid"/.test(line))!
      .replace(/"metadata": \{[^{}]*\}/, '"metadata": {"tfjs_num_tensors": 5}');
    const keys = [
      "allocator_allocated_bytes",
      "allocator_change_bytes",
      "device_id",
      "timestamp_ns",
      "tfjs_num_tensors",
    ];
    const edges = [
      "9007199254740991",
      "9007199254740992",
      "9999999999999999",
      "1000000000000000",
      "99999999",
      "100000000",
    ];
    const reader = new CanonicalLineReader();
    let accepted = 0;
    let declined = 0;
    for (const key of keys) {
      const tokens = [...edges, ...edges.map((edge) => `-${edge}`)];
      for (let length = 1; length <= 26; length++) tokens.push(digits(length), `-${digits(length)}`);
      // A digit run's end: every byte next to the digits in ASCII, and a few beyond.
      for (const after of "/:;<=>?.eE-+ ,}\u00e9")
        tokens.push(`${digits(9)}${after}`, `${digits(3)}${after}`);
      for (const token of tokens) {
        const changed = base.replace(new RegExp(`"${key}": -?\\d+`), `"${key}": ${token}`);
        expect(changed).not.toBe(base);
        if (readsLikeFresh(reader, base, changed)) accepted++;
        else declined++;
      }
    }
    expect(accepted).toBeGreaterThan(60);
    expect(declined).toBeGreaterThan(60);
  });

  it("reads a job's phase boundaries through templates, rank after rank (scope ids, sequences and depths are slots)", () => {
    const spy = fullReads();
    const reader = new CanonicalLineReader();
    const phases = ["train", "train / forward", "train / backward", "train / optimizer"];
    let lines = 0;
    // Ranks one after the other, as one file of a job holds them: each needs its own templates.
    for (let rank = 0; rank < 6; rank++) {
      const sessionId = `bench-session-${String(rank).padStart(3, "0")}`;
      let sequence = 0;
      for (let step = 0; step < 40; step++) {
        for (const [k, path] of phases.entries()) {
          for (const action of ["enter", "exit"] as const) {
            const parts = path.split(" / ");
            const scope = {
              action,
              depth: parts.length,
              name: parts.at(-1)!,
              parent_scope_id: k === 0 ? null : `${sessionId}:${step * 10 + 1}`,
              path: parts,
              scope_id: `${sessionId}:${step * 10 + 1 + k}`,
              sequence: ++sequence,
              thread_id: 1,
              thread_name: "main",
            };
            const line = encodeTelemetryRecord(
              record(action === "enter" ? "phase_enter" : "phase_exit", BASE_NS + BigInt(sequence * 1000), {
                session_id: sessionId,
                rank,
                world_size: 8,
                context: `Phase ${action === "enter" ? "entered" : "exited"}: ${path}`,
                allocator_allocated_bytes: 2 ** 31 + sequence * 4096,
                metadata: { phase_scope: scope, tfjs_num_tensors: 100 + (sequence % 7) },
              }),
            );
            expect(fastRead(line, reader), line).toBe(reader);
            expectSame(reader, decodeTelemetryLine(line), line);
            lines++;
          }
        }
      }
    }
    // One full read per kind of line of each rank (8), not per line: a new rank's templates replace
    // the last rank's, the least recently used first.
    expect(lines).toBe(6 * 40 * 8);
    expect(spy.mock.calls.length).toBeLessThanOrEqual(6 * 8 + 4);
    spy.mockRestore();
  });

  it("reads the metadata's numbers and string digits in every form as a fresh reader does", () => {
    const next = seededRandom(47);
    const digits = (length: number): string =>
      Array.from({ length }, (_, i) =>
        String(i === 0 ? 1 + Math.floor(next() * 9) : Math.floor(next() * 10)),
      ).join("");
    const base = encodeTelemetryRecord(
      record("phase_enter", BASE_NS, {
        metadata: {
          phase_scope: {
            action: "enter",
            depth: 2,
            name: "forward",
            parent_scope_id: "s-a:17",
            path: ["train", "forward"],
            scope_id: "s-a:18",
            sequence: 123,
            thread_id: -4,
            thread_name: "main",
          },
          nested: { list: [5, "v2"] },
          tfjs_num_tensors: 9,
        },
      }),
    );
    const numberTokens = [
      "0",
      "-0",
      "00",
      "01",
      "-01",
      "-",
      "1.5",
      "1e3",
      "1E3",
      "-1",
      "null",
      '"7"',
      "7 ",
      " 7",
    ];
    for (let length = 1; length <= 18; length++) numberTokens.push(digits(length), `-${digits(length)}`);
    const stringTokens = ["", "0", "00", "x", "1x", "12.5", "\\u0031", digits(1), digits(9), digits(20)];
    const edits: [RegExp, string[]][] = [
      [/"sequence": 123/, numberTokens.map((token) => `"sequence": ${token}`)],
      [/"depth": 2/, numberTokens.map((token) => `"depth": ${token}`)],
      [/"thread_id": -4/, numberTokens.map((token) => `"thread_id": ${token}`)],
      [/\[5, "v2"\]/, numberTokens.map((token) => `[${token}, "v2"]`)],
      [/"scope_id": "s-a:18"/, stringTokens.map((token) => `"scope_id": "s-a:${token}"`)],
      [/"v2"\]/, stringTokens.map((token) => `"v${token}"]`)],
    ];
    const reader = new CanonicalLineReader();
    let accepted = 0;
    let declined = 0;
    for (const [pattern, replacements] of edits) {
      for (const replacement of replacements) {
        if (readsLikeFresh(reader, base, base.replace(pattern, replacement))) accepted++;
        else declined++;
      }
    }
    expect(accepted).toBeGreaterThan(80);
    expect(declined).toBeGreaterThan(10);
  });

  it("stops making templates where no line reads like another, and keeps no long line", () => {
    const spy = vi.spyOn(CanonicalLineReader.prototype as unknown as { remember: () => void }, "remember");
    const reader = new CanonicalLineReader();
    for (let i = 0; i < 200; i++) {
      const line = encodeTelemetryRecord(record("sample", BASE_NS + BigInt(i), { context: `sample ${i}` }));
      expect(fastRead(line, reader)).toBe(reader);
      expect(reader.context()).toBe(`sample ${i}`);
    }
    // A few tries (as many as templates are kept), then none in the rest of the window.
    expect(spy.mock.calls.length).toBeLessThanOrEqual(16);
    spy.mockClear();
    const long = new CanonicalLineReader();
    const line = encodeTelemetryRecord(record("sample", BASE_NS, { context: "x".repeat(5000) }));
    expect(fastRead(line, long)).toBe(long);
    expect(spy).not.toHaveBeenCalled();
    spy.mockRestore();
  });
});
