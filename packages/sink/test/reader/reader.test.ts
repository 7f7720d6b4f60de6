import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { encodeTelemetryRecord, JsonlDecodeError, stringifyJson } from "@stormlog/core";
import { stableLegacySessionId } from "@stormlog/core/internal";
import { describe, expect, it } from "vitest";
import { sampleRecord } from "../../scripts/sample-records.js";
import {
  iterateTelemetryEvents,
  loadTelemetryEvents,
  loadTelemetrySessions,
  openTelemetrySession,
  SessionNotFoundError,
  sinkDirectoryForProcess,
  summarizeTelemetrySessions,
  TelemetrySink,
  TelemetrySourceError,
} from "../../src/index.js";
import { resolveTelemetryInput } from "../../src/internal.js";
import { describeTelemetryInput } from "../../src/reader/reader.js";
import { quiet, tempDir } from "../helpers.js";

const FIXTURES = join(import.meta.dirname, "../../../../fixtures/golden/python-sink");

function jsonl(records: object[]): string {
  return records.map((record) => `${encodeTelemetryRecord(record as never)}\n`).join("");
}

describe("loaders", () => {
  it("read a JSONL file, grouping by session and ordering completed before incomplete", async () => {
    const dir = tempDir();
    const path = join(dir, "events.jsonl");
    const a = Array.from({ length: 5 }, (_, i) => sampleRecord("a", i));
    const b = [
      ...Array.from({ length: 3 }, (_, i) => sampleRecord("b", i + 10)),
      sampleRecord("b", 20, { eventType: "stop" }),
    ];
    writeFileSync(path, jsonl([b[2]!, a[0]!, b[0]!, a[1]!, a[2]!, b[1]!, a[3]!, a[4]!, b[3]!]));
    const sessions = await loadTelemetrySessions(path);
    expect(sessions.map((s) => [s.summary.session_id, s.summary.status, s.eventCount])).toEqual([
      ["b", "completed", 4],
      ["a", "incomplete", 5],
    ]);
    expect(sessions[0]!.summary.ended_at_ns).toBe(b[3]!.timestamp_ns);
    expect(sessions[0]!.events.map((e) => e.timestamp_ns)).toEqual(b.map((r) => r.timestamp_ns));
    expect(sessions[1]!.summary).toMatchObject({
      started_at_ns: a[0]!.timestamp_ns,
      host: "trainer-a",
      source: "artifact:events.jsonl",
    });
  });

  it("read a JSON array, a JSON object with events (or another key) and a single record", async () => {
    const dir = tempDir();
    const records = [sampleRecord("x", 0), sampleRecord("x", 1)];
    const arrayPath = join(dir, "array.json");
    writeFileSync(arrayPath, stringifyJson(records as never));
    const objectPath = join(dir, "object.json");
    writeFileSync(objectPath, stringifyJson({ events: records } as never));
    const keyedPath = join(dir, "keyed.json");
    writeFileSync(keyedPath, stringifyJson({ samples: records } as never));
    const singlePath = join(dir, "single.json");
    writeFileSync(singlePath, stringifyJson(records[0] as never));
    expect((await loadTelemetryEvents(arrayPath)).length).toBe(2);
    expect((await loadTelemetryEvents(objectPath)).length).toBe(2);
    expect((await loadTelemetryEvents(keyedPath, { eventsKey: "samples" })).length).toBe(2);
    await expect(loadTelemetryEvents(keyedPath)).rejects.toThrow("does not contain telemetry events");
    await expect(loadTelemetryEvents(objectPath, { eventsKey: "nope" })).rejects.toThrow(
      "must contain a list",
    );
    expect((await loadTelemetryEvents(singlePath)).length).toBe(1);
  });

  it("give legacy records the file's synthetic session, as the reference", async () => {
    const dir = tempDir();
    const path = join(dir, "legacy.json");
    writeFileSync(
      path,
      JSON.stringify([{ timestamp: 1700000000.5, memory_allocated: 1024, device: "cuda:0" }]),
    );
    const [event] = await loadTelemetryEvents(path);
    const { realpathSync } = await import("node:fs");
    expect(event!.session_id).toBe(stableLegacySessionId([realpathSync(path), "json"]));
    expect(event!.collector).toBe("stormlog.cuda_tracker");
  });

  it("drop a final line cut short, report it, and fail on any other malformed line", async () => {
    const dir = tempDir();
    const path = join(dir, "cut.jsonl");
    const body = jsonl([sampleRecord("s", 0), sampleRecord("s", 1)]);
    writeFileSync(path, `${body}{"allocator_active_bytes": nu`);
    const warnings: string[] = [];
    const sessions = await loadTelemetrySessions(path, { onWarning: (m) => warnings.push(m) });
    expect(sessions[0]!.eventCount).toBe(2);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("cut short");
    expect(sessions[0]!.warnings).toEqual(warnings);

    writeFileSync(path, `{"broken": \n${body}`);
    const error = await loadTelemetrySessions(path).catch((e: unknown) => e);
    expect(JsonlDecodeError.isInstance(error)).toBe(true);
    expect(String(error)).toContain("cut.jsonl:1");
  });

  it("select a session by id, and list the ids there are for an unknown one", async () => {
    const dir = tempDir();
    cpSync(join(FIXTURES, "three-sessions-pruned/sink"), dir, { recursive: true });
    const events = await loadTelemetryEvents(dir, { sessionId: "8e8abdb2-b8e3-4013-8c93-84922b33e465" });
    expect(events).toHaveLength(31);
    const error = await loadTelemetryEvents(dir, { sessionId: "nope" }).catch((e: unknown) => e);
    expect(SessionNotFoundError.isInstance(error)).toBe(true);
    expect((error as SessionNotFoundError).availableSessionIds).toEqual([
      "21736645-78dc-4d3b-a54f-ebd0df2c9b06",
      "52582403-872a-4409-9a5e-01e1dfff43cc",
      "8e8abdb2-b8e3-4013-8c93-84922b33e465",
    ]);
    expect(String(error)).toContain("52582403-872a-4409-9a5e-01e1dfff43cc");
  });

  it("stream one session after choosing it, without loading it", async () => {
    const opened = await openTelemetrySession(join(FIXTURES, "completed-then-crash/sink"));
    expect(opened?.session.summary.session_id).toBe("efc71cec-cfca-4eb5-9f00-9b7b08837b4a");
    let count = 0;
    for await (const event of opened!.events()) {
      expect(event.session_id).toBe("efc71cec-cfca-4eb5-9f00-9b7b08837b4a");
      count++;
    }
    expect(count).toBe(62);
    await expect(
      openTelemetrySession(join(FIXTURES, "completed-then-crash/sink"), { sessionId: "x" }),
    ).rejects.toThrow(SessionNotFoundError);
  });

  it("read a root holding one sink directory per process", async () => {
    const root = tempDir();
    for (const rank of [0, 1, 2]) {
      const sink = new TelemetrySink({
        rootDir: sinkDirectoryForProcess(root, { rank, pid: 100 + rank }),
        ...quiet,
      });
      const { session_id: id } = sink.startSession({ session_id: `rank-${rank}`, rank, world_size: 3 });
      for (let i = 0; i < 10 + rank; i++) sink.append(sampleRecord(id, i, { rank, worldSize: 3 }));
      await sink.close();
    }
    expect(await describeTelemetryInput(root)).toMatchObject({ kind: "sink-root" });
    const sessions = await summarizeTelemetrySessions(root);
    expect(sessions.map((s) => [s.summary.session_id, s.eventCount]).sort()).toEqual([
      ["rank-0", 10],
      ["rank-1", 11],
      ["rank-2", 12],
    ]);
    let streamed = 0;
    for await (const _ of iterateTelemetryEvents(root)) streamed++;
    expect(streamed).toBe(33);
  });

  it("give the ledger's sessions even when all their segments were pruned", async () => {
    const dir = tempDir();
    cpSync(join(FIXTURES, "three-sessions-pruned/sink"), dir, { recursive: true });
    for (const name of [
      "segment-000005.jsonl",
      "segment-000006.jsonl",
      "segment-000007.jsonl",
      "segment-000008.jsonl",
      "segment-000009.jsonl",
    ]) {
      writeFileSync(join(dir, name), "");
    }
    const sessions = await summarizeTelemetrySessions(dir);
    expect(sessions.map((s) => s.eventCount)).toEqual([0, 0, 0]);
  });

  it("refuse a path that holds no telemetry", async () => {
    const dir = tempDir();
    mkdirSync(join(dir, "empty"));
    await expect(summarizeTelemetrySessions(join(dir, "empty"))).rejects.toThrow(TelemetrySourceError);
    await expect(summarizeTelemetrySessions(join(dir, "missing"))).rejects.toThrow("does not exist");
  });

  it("use the manifest's segment session for records without one", async () => {
    const dir = tempDir();
    cpSync(join(FIXTURES, "single-completed/sink"), dir, { recursive: true });
    const segment = join(dir, "segment-000001.jsonl");
    const lines = readFileSync(segment, "utf8").split("\n").filter(Boolean);
    const stripped = lines.map((line) => line.replace(/"session_id": "[^"]*", /, ""));
    writeFileSync(segment, `${stripped.join("\n")}\n`);
    const sessions = await summarizeTelemetrySessions(dir);
    expect(sessions.map((s) => [s.summary.session_id, s.eventCount])).toEqual([
      ["2cfda835-2b8e-4a5e-9a84-9a8adf638072", 42],
    ]);
  });
});

describe("resolveTelemetryInput on a root of rank directories", () => {
  it("reads them side by side but reports their warnings in directory order", async () => {
    const root = tempDir();
    const names = Array.from({ length: 12 }, (_, i) => `rank-${String(i).padStart(2, "0")}`);
    for (const name of names) {
      mkdirSync(join(root, name));
      writeFileSync(
        join(root, name, "segment-000001.jsonl"),
        `${encodeTelemetryRecord(sampleRecord(name, 0))}\n`,
      );
      writeFileSync(
        join(root, name, "manifest.json"),
        stringifyJson({
          schema_version: 2,
          format: "stormlog.append_only_telemetry_sink",
          sessions: [],
          segments: [
            { filename: `../${name}.jsonl`, event_count: 1, size_bytes: 1, closed: true, session_id: null },
          ],
        }),
      );
    }
    const warnings: string[] = [];
    const input = await resolveTelemetryInput(root, (message) => warnings.push(message));
    expect(input.parts.map((part) => part.dir)).toEqual(names.map((name) => join(root, name)));
    expect(warnings.map((message) => /"\.\.\/(rank-\d+)\.jsonl"/.exec(message)?.[1])).toEqual(names);
  });
});
