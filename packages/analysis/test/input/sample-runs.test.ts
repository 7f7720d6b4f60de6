import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeTelemetryRecord, type JsonObject } from "@stormlog/core";
import { LIVE_BY_PHASE_KEY, seededRandom } from "@stormlog/phases/internal";
import { afterAll, describe, expect, it } from "vitest";
import { BASE_NS, record } from "../../../sink/test/support/telemetry-fixtures.js";
import { scansIn } from "./fixtures/scans-in-child.js";

const dir = mkdtempSync(join(tmpdir(), "stormlog-sample-runs-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A writer's lines, mostly runs of samples (what the kernel reads in one call), broken by what it
 * must leave to the line-by-line path: phase boundaries, other ranks, hosts and sessions (new
 * templates), samples whose metadata holds birth counts or attribution hints, `\r\n` and lone `\r`
 * ends, trailing blanks, blank lines, and numbers whose lengths change.
 */
function writerText(seed: number, count: number): string {
  const next = seededRandom(seed);
  const pick = <T>(values: readonly T[]): T => values[Math.floor(next() * values.length)]!;
  const parts: string[] = [];
  let t = BASE_NS;
  let rank = 0;
  let host = "node-0";
  let session = "session-a";
  let sequence = 0;
  for (let i = 0; i < count; i++) {
    t += BigInt(1 + Math.floor(next() * 10 ** (1 + Math.floor(next() * 9))));
    const roll = next();
    if (roll < 0.01) rank = Math.floor(next() * 4);
    else if (roll < 0.015) host = pick(["node-0", "node-1", "n2"]);
    else if (roll < 0.018) session = pick(["session-a", "session-b"]);
    const common = {
      session_id: session,
      rank,
      local_rank: rank,
      world_size: 4,
      host,
      allocator_allocated_bytes: Math.floor(next() * 2 ** (1 + Math.floor(next() * 40))),
      allocator_reserved_bytes: Math.floor(next() * 2 ** 41),
      allocator_active_bytes: next() < 0.1 ? Math.floor(next() * 1000) : null,
      device_used_bytes: Math.floor(next() * 2 ** 40),
      device_total_bytes: next() < 0.05 ? null : 2 ** 41,
      device_free_bytes: next() < 0.5 ? null : Math.floor(next() * 2 ** 40),
      pid: next() < 0.01 ? -1 : 4000 + rank,
    };
    let metadata: JsonObject =
      next() < 0.2 ? {} : { tfjs_num_tensors: Math.floor(next() * 10 ** Math.floor(next() * 6)) };
    let eventType = "sample";
    const kind = next();
    if (kind < 0.06) {
      eventType = pick(["phase_enter", "phase_exit"]);
      sequence++;
      metadata = {
        phase_scope: {
          action: eventType === "phase_enter" ? "enter" : "exit",
          depth: 1,
          name: "step",
          parent_scope_id: null,
          path: ["step"],
          scope_id: `${session}:${sequence}`,
          sequence,
          thread_id: 1,
          thread_name: "main",
        },
        tfjs_num_tensors: 3,
      };
    } else if (kind < 0.07)
      metadata = { [LIVE_BY_PHASE_KEY]: { step: Math.floor(next() * 100) }, tfjs_num_tensors: 1 };
    else if (kind < 0.08) metadata = { origin_thread_id: 1, tfjs_num_tensors: 2 };
    else if (kind < 0.085) eventType = pick(["start", "Sample"]);
    parts.push(encodeTelemetryRecord(record(eventType, t, { ...common, metadata })));
    const end = next();
    if (end < 0.02) parts.push("\r\n");
    else if (end < 0.03) parts.push(`${pick([" ", "\t", "  \t"])}\n`);
    else if (end < 0.035) parts.push("\r \n");
    else if (end < 0.04) parts.push("\r\r\n");
    else if (end < 0.045) parts.push(`\n${pick(["", " ", "\t", "\r"])}\n`);
    else parts.push("\n");
  }
  return parts.join("");
}

describe("runs of sample lines read in one call into the kernel", () => {
  it("make the aggregate that reading every line in full makes, across read chunks", () => {
    const files: string[] = [];
    // ~10 MB: lines cut by the scan's 4 MB chunks; then short files ending in every way.
    const big = writerText(7, 16000);
    expect(big.length).toBeGreaterThan(9 << 20);
    files.push(join(dir, "big.jsonl"));
    writeFileSync(files[0]!, big);
    for (let seed = 1; seed <= 6; seed++) {
      const file = join(dir, `short-${seed}.jsonl`);
      const text = writerText(100 + seed, 200 + seed * 50);
      // Without its last newline, or cut inside its last line.
      writeFileSync(file, seed % 3 === 0 ? text.trimEnd() : seed % 3 === 1 ? text.slice(0, -40) : text);
      files.push(file);
    }
    // Short samples: more lines in a 4 MB chunk than the kernel has rows for one call (8,192).
    const short = join(dir, "short-lines.jsonl");
    const shortLines: string[] = [];
    for (let i = 0; i < 12000; i++)
      shortLines.push(
        encodeTelemetryRecord(
          record("sample", 10n ** 12n + BigInt(i) * 1000n, {
            session_id: "s",
            host: "h",
            collector: "c",
            context: null,
            pid: 1,
            allocator_active_bytes: 0,
            allocator_inactive_bytes: 0,
            device_total_bytes: null,
            device_used_bytes: i % 10,
            metadata: {},
          }),
        ),
      );
    writeFileSync(short, `${shortLines.join("\n")}\n`);
    expect((4 << 20) / (Buffer.byteLength(shortLines[0]!) + 1)).toBeGreaterThan(8192);
    files.push(short);
    // A sample that breaks a rule after a run (rank not below world size): the same error.
    const bad = join(dir, "bad.jsonl");
    const good = writerText(9, 300);
    writeFileSync(
      bad,
      `${good}${encodeTelemetryRecord(record("sample", BASE_NS + 10n ** 15n, { rank: 0, world_size: 4 })).replace('"rank": 0', '"rank": 9')}\n${good}`,
    );
    files.push(bad);
    const withKernel = scansIn([], files);
    const without = scansIn(["--jitless"], files);
    expect(withKernel.webAssembly).toBe(true);
    expect(without.webAssembly).toBe(false);
    expect(without.scans).toHaveLength(files.length);
    expect((without.scans.at(-1) as { error: string }).error).toMatch(/rank/);
    for (let i = 0; i < files.length; i++) expect(withKernel.scans[i], files[i]).toEqual(without.scans[i]);
  });
});
