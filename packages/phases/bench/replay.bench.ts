// Phase replay index: build time for 1M phase records and attribution lookups per second.
// Run: node --conditions=@stormlog/source --import tsx packages/phases/bench/replay.bench.ts
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { type PhaseEventLike, PhaseReplayIndex } from "../src/index.js";

const RANKS = 4;
const RECORDS = 1_000_000;
const BASE_NS = 1_760_000_000_000_000_000n;

/**
 * Per rank, one session: an open `train` scope, then steps of forward/backward/optimizer_step
 * (each enter+exit) 1-3 ms apart, on one thread, like a training loop. Paths are shared arrays,
 * as decoded records of one run would hold equal values.
 */
function phaseRecords(total: number): PhaseEventLike[] {
  const events: PhaseEventLike[] = [];
  const perRank = Math.floor(total / RANKS);
  const leafPaths = [
    ["train", "forward"],
    ["train", "backward"],
    ["train", "optimizer_step"],
  ];
  for (let rank = 0; rank < RANKS; rank++) {
    const sessionId = `session-rank${rank}`;
    let sequence = 0;
    let t = BASE_NS + BigInt(rank) * 17_000n;
    const record = (
      action: "enter" | "exit",
      path: string[],
      scopeSequence: number,
      parent: string | null,
    ) => {
      sequence++;
      events.push({
        session_id: sessionId,
        timestamp_ns: t,
        rank,
        event_type: action === "enter" ? "phase_enter" : "phase_exit",
        metadata: {
          phase_scope: {
            action,
            name: path[path.length - 1]!,
            path,
            depth: path.length,
            scope_id: `${sessionId}:${scopeSequence}`,
            parent_scope_id: parent,
            thread_id: 1,
            thread_name: "MainThread",
            sequence,
          },
        },
      });
    };
    record("enter", ["train"], 1, null);
    const trainId = `${sessionId}:1`;
    let leaf = 0;
    while (sequence < perRank - 1) {
      const path = leafPaths[leaf++ % 3]!;
      t += 1_000_000n + BigInt(leaf % 7) * 300_000n;
      const scopeSequence = sequence + 1;
      record("enter", path, scopeSequence, trainId);
      t += 2_000_000n;
      record("exit", path, scopeSequence, trainId);
    }
  }
  return events;
}

const events = phaseRecords(RECORDS);
const started = performance.now();
const index = PhaseReplayIndex.fromEvents(events);
console.log(
  `built ${index.size} spans from ${events.length} records in ${(performance.now() - started).toFixed(0)} ms (first build)`,
);

const lastNs = events[events.length - 1]!.timestamp_ns as bigint;
const span = Number(lastNs - BASE_NS);
const QUERIES = 4096;
const queries: Array<[bigint, string, number]> = [];
let seed = 42;
for (let i = 0; i < QUERIES; i++) {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  const rank = seed % RANKS;
  queries.push([BASE_NS + BigInt(Math.floor((seed / 2147483648) * span)), `session-rank${rank}`, rank]);
}

// Queries in time order, as analyses issue them (events sorted by timestamp).
const ordered = [...queries].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));

summary(() => {
  let i = 0;
  bench("phases/replay-resolve-random", () => {
    const q = queries[i++ & (QUERIES - 1)]!;
    return do_not_optimize(index.resolve(q[0], q[1], q[2]));
  });
  let k = 0;
  bench("phases/replay-resolve-ordered", () => {
    const q = ordered[k++ & (QUERIES - 1)]!;
    return do_not_optimize(index.resolve(q[0], q[1], q[2]));
  });
  let j = 0;
  bench("phases/replay-active-spans", () => {
    const q = queries[j++ & (QUERIES - 1)]!;
    return do_not_optimize(index.activeSpans(q[0], q[1], q[2]));
  });
});

// Last: builds leave garbage that would disturb the lookups above.
group("phases/replay", () => {
  bench("phases/replay-build-1M-records", () => do_not_optimize(PhaseReplayIndex.fromEvents(events)));
});

await run();
