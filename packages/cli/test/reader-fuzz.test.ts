/**
 * A fuzz test over the readers: valid sinks and JSON documents, damaged a few hundred ways by one
 * seeded generator, are read by the sink's loader, the analysis (its fast and general scan paths,
 * with and without its index) and the CLI. Each either reads the input or refuses it with one of
 * the packages' typed errors, on one line, naming the damaged file (and its line for content) —
 * never a TypeError, a RangeError or an "internal error", never a hang.
 */
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { analyzeTelemetry, reportToJson, TimeRangeError } from "@stormlog/analysis";
import {
  encodeTelemetryRecord,
  JsonlDecodeError,
  parseJson,
  StormlogError,
  stringifyJson,
  type TelemetryEvent,
  TelemetryValidationError,
} from "@stormlog/core";
import { seededRandom } from "@stormlog/phases/internal";
import { loadTelemetrySessions, TelemetrySourceError } from "@stormlog/sink";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, deepJson, Timeline, writeSink } from "../../sink/test/support/telemetry-fixtures.js";
import { RAW_CONTROL, runCli, tempDir } from "./helpers.js";

const CASES = 300;
const random = seededRandom(20_261_127);
const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
const between = (low: number, high: number): number => low + Math.floor(random() * (high - low + 1));

/** One rank of a two-rank job: samples with tensor counts, nested phases, an alert, a health change. */
function rankEvents(rank: number): TelemetryEvent[] {
  const t = new Timeline(
    { session_id: `job-rank-${rank}`, rank, world_size: 2, job_id: "job-fuzz", pid: 100 + rank },
    BASE_NS + BigInt(rank) * 1_000_000n,
  );
  t.tensors = 10;
  for (let step = 0; step < 6; step++) {
    t.sample();
    t.enter("train").enter("forward");
    t.allocated += 1 << 20;
    t.tensors += 2;
    t.sample();
    t.exit().enter("backward").sample().exit().exit();
    if (step === 3) t.event("warning", { context: "Memory pressure high", metadata: { ratio: 0.93 } });
    if (step === 4) t.event("collector_degraded", { metadata: { collector_last_error: "timeout" } });
  }
  return t.events;
}

const base = tempDir("stormlog-fuzz-");
afterAll(() => base.remove());

/**
 * The valid inputs every case starts from: a root of two rank sinks (rank 0 in the canonical layout
 * the scan's fast path reads, rank 1 written compact, which takes the general path), and a JSON
 * document.
 */
const pristine = join(base.path, "pristine");
const segments: string[] = [];
for (const rank of [0, 1]) {
  for (const segment of writeSink(join(pristine, `rank-${rank}`), rankEvents(rank), { segmentSize: 17 })) {
    if (rank === 1)
      writeFileSync(segment, readFileSync(segment, "utf8").replaceAll('": ', '":').replaceAll(', "', ',"'));
    segments.push(segment);
  }
}
const manifests = [0, 1].map((rank) => join(pristine, `rank-${rank}`, "manifest.json"));
const documentRecords = rankEvents(0)
  .slice(0, 12)
  .map((event) => parseJson(encodeTelemetryRecord(event)));
const documentText = `${stringifyJson({ events: documentRecords }, { indent: 2 })}\n`;

/** Values that replace a JSON value: wrong types, huge and non-finite numbers, hostile strings. */
const VALUES = [
  '"text"',
  "true",
  "null",
  "{}",
  "[]",
  "-1",
  "1.5",
  "1e400",
  "-1e400",
  "123456789012345678901234567890",
  "18446744073709551616",
  "9007199254740993",
  "NaN",
  "Infinity",
  "-Infinity",
  '"\\u001b]0;owned\\u0007"',
  '"\\ud800"',
  '{"__proto__": {"event_type": "sample"}}',
  '{"__proto__": null}',
  deepJson(600),
  `{"a": ${deepJson(5000)}}`,
];

/** One damage done to a file's bytes. */
type Mutation = (bytes: Buffer) => Buffer;

const fromText = (text: string): Buffer => Buffer.from(text, "utf8");

/** A random line boundary range `[start, end)` of `bytes` (end excludes the newline). */
function someLine(bytes: Buffer): [number, number] {
  const starts = [0];
  for (let i = 0; i < bytes.length - 1; i++) if (bytes[i] === 10) starts.push(i + 1);
  const start = pick(starts);
  const newline = bytes.indexOf(10, start);
  return [start, newline === -1 ? bytes.length : newline];
}

/** Offsets where a JSON value starts (after `": ` or `":`), found in the text. */
function valueStarts(text: string): number[] {
  const found: number[] = [];
  for (let at = text.indexOf('":'); at !== -1; at = text.indexOf('":', at + 1))
    found.push(text[at + 2] === " " ? at + 3 : at + 2);
  return found;
}

/** Where the JSON value starting at `start` ends (a rough scan: enough to replace scalars and small containers). */
function valueEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') {
        inString = false;
        if (depth === 0) return i + 1;
      }
      continue;
    }
    if (c === '"') inString = true;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      if (depth === 0) return i;
      depth--;
      if (depth === 0) return i + 1;
    } else if ((c === "," || c === "\n") && depth === 0) return i;
  }
  return text.length;
}

const MUTATIONS: Record<string, Mutation> = {
  truncateLine(bytes) {
    const [start, end] = someLine(bytes);
    const cut = between(start, end);
    return Buffer.concat([bytes.subarray(0, cut), random() < 0.5 ? bytes.subarray(end) : Buffer.alloc(0)]);
  },
  truncateFile(bytes) {
    return bytes.subarray(0, between(0, bytes.length));
  },
  flipByte(bytes) {
    const copy = Buffer.from(bytes);
    if (copy.length > 0) copy[between(0, copy.length - 1)]! ^= 1 << between(0, 7);
    return copy;
  },
  controlCharacter(bytes) {
    const at = between(0, bytes.length);
    const char = pick(["\u0000", "\u001b", "\u0007", "\r", "\u007f", "\u009b", "\u2028", "\t"]);
    return Buffer.concat([bytes.subarray(0, at), fromText(char), bytes.subarray(at)]);
  },
  invalidUtf8(bytes) {
    const at = between(0, bytes.length);
    const junk = pick([[0xff], [0xc3], [0xe2, 0x82], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]]);
    return Buffer.concat([bytes.subarray(0, at), Buffer.from(junk), bytes.subarray(at)]);
  },
  replaceValue(bytes) {
    const text = bytes.toString("utf8");
    const starts = valueStarts(text);
    if (starts.length === 0) return bytes;
    const start = pick(starts);
    return fromText(`${text.slice(0, start)}${pick(VALUES)}${text.slice(valueEnd(text, start))}`);
  },
  removeField(bytes) {
    const text = bytes.toString("utf8");
    const starts = valueStarts(text);
    if (starts.length === 0) return bytes;
    const start = pick(starts);
    const keyStart = text.lastIndexOf('"', text.lastIndexOf('"', start - 2) - 1);
    let end = valueEnd(text, start);
    if (text[end] === ",") end += text[end + 1] === " " ? 2 : 1;
    return fromText(`${text.slice(0, keyStart)}${text.slice(end)}`);
  },
  duplicateKey(bytes) {
    const text = bytes.toString("utf8");
    const key = pick([
      "timestamp_ns",
      "session_id",
      "event_type",
      "rank",
      "metadata",
      "__proto__",
      "bad\\nkey",
    ]);
    const at = text.indexOf("{", between(0, text.length));
    if (at === -1) return bytes;
    return fromText(`${text.slice(0, at + 1)}"${key}": ${pick(VALUES)}, ${text.slice(at + 1)}`);
  },
  hostileText(bytes) {
    const text = bytes.toString("utf8");
    const field = pick(["host", "job_id", "context", "session_id", "collector"]);
    const value = pick([
      "\\u001b]0;owned\\u0007",
      "\\u001b[2J",
      "\\u009b31m",
      "row\\nFAKE ROW",
      "\\u001b]8;;https://x.example\\u001b\\\\link\\u001b]8;;\\u001b\\\\",
      "x".repeat(5000),
    ]);
    return fromText(text.replaceAll(new RegExp(`"${field}": ?"[^"]*"`, "g"), `"${field}": "${value}"`));
  },
  moveTimestamp(bytes) {
    const text = bytes.toString("utf8");
    const at = pick([...text.matchAll(/"timestamp_ns": ?(\d+)/g)]);
    if (at === undefined) return bytes;
    const moved = pick([
      "0",
      "1",
      "18446744073709551615",
      "9223372036854775807",
      String(BASE_NS + 10n ** 17n),
    ]);
    const start = at.index + at[0].length - at[1]!.length;
    return fromText(`${text.slice(0, start)}${moved}${text.slice(start + at[1]!.length)}`);
  },
  swapLines(bytes) {
    const lines = bytes.toString("utf8").split("\n");
    const i = between(0, lines.length - 1);
    const j = between(0, lines.length - 1);
    [lines[i], lines[j]] = [lines[j]!, lines[i]!];
    return fromText(lines.join("\n"));
  },
  garbage(bytes) {
    const size = between(0, 200);
    const junk = Buffer.alloc(size);
    for (let i = 0; i < size; i++) junk[i] = between(0, 255);
    return random() < 0.5 ? junk : Buffer.concat([bytes, junk]);
  },
};
const MUTATION_NAMES = Object.keys(MUTATIONS);

/** `bytes` with the named mutations done, in order. */
function damage(bytes: Buffer, mutations: readonly string[]): Buffer {
  return mutations.reduce<Buffer>((done, name) => MUTATIONS[name]!(done), bytes);
}

/** One fuzz case: a damaged copy of an input, and the path a reader is given. */
interface FuzzCase {
  readonly index: number;
  readonly damaged: string;
  readonly input: string;
  readonly mutations: readonly string[];
}

function makeCase(index: number): FuzzCase {
  const dir = join(base.path, `case-${index}`);
  const mutations = Array.from({ length: between(1, 3) }, () => pick(MUTATION_NAMES));
  const target = random();
  let damaged: string;
  let input: string;
  if (target < 0.25) {
    mkdirSync(dir);
    damaged = join(dir, "events.json");
    input = damaged;
    writeFileSync(damaged, damage(fromText(documentText), mutations));
  } else {
    cpSync(pristine, dir, { recursive: true });
    const original = target < 0.4 ? pick(manifests) : pick(segments);
    damaged = join(dir, relative(pristine, original));
    writeFileSync(damaged, damage(readFileSync(damaged), mutations));
    // The root, one rank's directory, or the damaged file itself.
    const choice = random();
    input = choice < 0.6 ? dir : choice < 0.8 ? join(damaged, "..") : damaged;
  }
  return { index, damaged, input, mutations };
}

/** What a reader did: read the input, or threw. */
type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

async function outcome(read: () => Promise<unknown>): Promise<Outcome> {
  try {
    return { ok: true, value: await read() };
  } catch (error) {
    return { ok: false, error };
  }
}

/** Problems with a refusal: not typed, several lines, not naming the damaged file (and line). */
function refusalProblems(fuzz: FuzzCase, error: unknown): string[] {
  const problems: string[] = [];
  const message = error instanceof Error ? error.message : String(error);
  if (!StormlogError.isInstance(error)) problems.push(`untyped ${(error as Error)?.name}: ${message}`);
  if (message.includes("\n")) problems.push(`several lines: ${message}`);
  // The damaged file; an error about the whole input (no sink in it) may name the input instead.
  const names =
    message.includes(fuzz.damaged) ||
    (TelemetrySourceError.isInstance(error) && message.includes(fuzz.input));
  if (!names) problems.push(`does not name ${fuzz.damaged}: ${message}`);
  const content = JsonlDecodeError.isInstance(error) || TelemetryValidationError.isInstance(error);
  if (content && !new RegExp(`${fuzz.damaged.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:\\d+`).test(message))
    problems.push(`does not name the line: ${message}`);
  return problems;
}

function withoutIndex(report: unknown): string {
  const json = reportToJson(report as Parameters<typeof reportToJson>[0]);
  delete json.index;
  return stringifyJson(json);
}

describe("fuzz over the readers", () => {
  it(`reads or refuses ${CASES} damaged inputs with typed one-line errors naming the file`, async () => {
    const failures: string[] = [];
    const note = (fuzz: FuzzCase, reader: string, problems: string[]): void => {
      for (const problem of problems)
        failures.push(`case ${fuzz.index} [${fuzz.mutations.join(", ")}] ${reader}: ${problem}`);
    };
    let refused = 0;
    let read = 0;
    for (let index = 0; index < CASES; index++) {
      const fuzz = makeCase(index);
      const sink = await outcome(() => loadTelemetrySessions(fuzz.input));
      const scanned = await outcome(() => analyzeTelemetry(fuzz.input, { index: false }));
      const indexed = await outcome(() => analyzeTelemetry(fuzz.input, { index: true }));
      for (const [reader, result] of [
        ["loadTelemetrySessions", sink],
        ["analyzeTelemetry --no-index", scanned],
        ["analyzeTelemetry (index)", indexed],
      ] as const) {
        if (result.ok) read++;
        else {
          refused++;
          note(fuzz, reader, refusalProblems(fuzz, result.error));
        }
      }
      // The analysis refuses what the sink's loader refuses, with the same error; what the loader
      // reads, it reads too, unless the records span more time than one capture can.
      const timeRange = !scanned.ok && TimeRangeError.isInstance(scanned.error);
      if (!sink.ok && (scanned.ok || (!timeRange && String(scanned.error) !== String(sink.error))))
        note(fuzz, "analysis", [
          `reads otherwise: ${scanned.ok ? "read" : String(scanned.error)} / ${String(sink.error)}`,
        ]);
      if (sink.ok && !scanned.ok && !timeRange)
        note(fuzz, "analysis", [`refuses what the loader reads: ${String(scanned.error)}`]);
      // The index changes nothing: the same report, or the same refusal.
      if (scanned.ok !== indexed.ok) note(fuzz, "index", ["reads what the scan refuses, or the reverse"]);
      else if (scanned.ok && indexed.ok && withoutIndex(scanned.value) !== withoutIndex(indexed.value))
        note(fuzz, "index", ["another report"]);
      else if (!scanned.ok && !indexed.ok && String(scanned.error) !== String(indexed.error))
        note(fuzz, "index", [`another refusal: ${String(scanned.error)} / ${String(indexed.error)}`]);
      // The CLI in-process: analyze on every case, sessions, diagnose and export in turn.
      const other = [
        ["sessions"],
        ["diagnose"],
        ["export", "--format", "perfetto", "-o", join(base.path, "trace.json")],
      ];
      for (const command of [["analyze", "--no-index"], other[index % 3]!]) {
        const run = await runCli([command[0]!, fuzz.input, ...command.slice(1)]);
        const problems: string[] = [];
        if (![0, 1, 2].includes(run.code)) problems.push(`exit code ${run.code}`);
        if (run.stderr.includes("internal error")) problems.push(run.stderr);
        if (run.code !== 0 && run.code !== 2 && run.stderr.split("\n").filter(Boolean).length !== 1)
          problems.push(`not one line: ${run.stderr}`);
        if (RAW_CONTROL.test(run.stdout) || RAW_CONTROL.test(run.stderr))
          problems.push(`raw control characters: ${JSON.stringify(run.stdout + run.stderr).slice(0, 300)}`);
        note(fuzz, `stormlog ${command.join(" ")}`, problems);
      }
    }
    expect(failures.slice(0, 30)).toEqual([]);
    // The damage is real: some inputs are refused, some still read.
    expect(refused).toBeGreaterThan(CASES / 4);
    expect(read).toBeGreaterThan(CASES / 4);
  }, 120_000);
});
