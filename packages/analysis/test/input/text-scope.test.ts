import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeTelemetryLine, type JsonValue, stringifyJson, type TelemetryEvent } from "@stormlog/core";
import { afterAll, describe, expect, it } from "vitest";
import { decodeAggregate, encodeAggregate } from "../../src/index/index-format.js";
import { analyzeEvents, analyzeTelemetry } from "../../src/index.js";
import { TextScopeBoundary } from "../../src/input/boundary-log.js";
import { scanSegmentSync } from "../../src/input/scan.js";
import { pieceJobEvents, pieceJobText } from "../support/piece-job.js";

const temp = mkdtempSync(join(tmpdir(), "stormlog-text-scope-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

describe("a boundary's scope kept as the text of its line", () => {
  const events = pieceJobEvents();
  const path = join(temp, "job.jsonl");
  writeFileSync(path, pieceJobText(events).text);
  const scanned = scanSegmentSync({ path, hint: null, defaultSessionId: "x" });

  it("reads as the record's phase_scope, before and after the index, parsed when first read", () => {
    const decoded = decodeAggregate(encodeAggregate(scanned, "s"), "s")!;
    let texts = 0;
    for (const [sessionId, session] of scanned.sessions) {
      for (const [rank, part] of session.ranks) {
        const read = decoded.sessions.get(sessionId)!.ranks.get(rank)!.boundaries;
        expect(read).toHaveLength(part.boundaries.length);
        part.boundaries.forEach((boundary, i) => {
          const scope = events[boundary.line - 1]!.metadata.phase_scope as JsonValue;
          // Rank 0's scopes hold a float: the exact path parses them whole.
          expect(boundary instanceof TextScopeBoundary).toBe(rank !== 0);
          expect(read[i] instanceof TextScopeBoundary).toBe(rank !== 0);
          if (boundary instanceof TextScopeBoundary) texts++;
          const text = stringifyJson(scope, { sortKeys: true });
          expect(stringifyJson(boundary.scope, { sortKeys: true })).toBe(text);
          expect(stringifyJson(read[i]!.scope, { sortKeys: true })).toBe(text);
          // Parsed once: the same object each time it is read.
          expect(read[i]!.scope).toBe(read[i]!.scope);
        });
      }
    }
    // Ranks 1-3: 24 steps of three phases, each entered and exited.
    expect(texts).toBe(3 * 24 * 6);
  });

  it("gives the phases and leaks of the records themselves", async () => {
    // The rank group alone (without rank 0's restart): what the report of the file selects.
    const group = join(temp, "group.jsonl");
    writeFileSync(group, pieceJobText(events.filter((event) => event.session_id !== "p-r0-restart")).text);
    const fromFile = await analyzeTelemetry(group, { index: false });
    // Every record as core decodes its line (a counter past 2^53 as a bigint).
    const lines = readFileSync(group, "utf8").trimEnd().split("\n");
    const fromEvents = analyzeEvents(lines.map((line) => decodeTelemetryLine(line) as TelemetryEvent));
    expect(fromFile.phases.length).toBeGreaterThan(2);
    expect(stringifyJson(fromFile.phases as unknown as JsonValue)).toBe(
      stringifyJson(fromEvents.phases as unknown as JsonValue),
    );
    expect(stringifyJson(fromFile.leaks as unknown as JsonValue)).toBe(
      stringifyJson(fromEvents.leaks as unknown as JsonValue),
    );
    expect(fromFile.leaks.some((leak) => leak.verdict === "leaking")).toBe(true);
  });
});
