/**
 * A scan worker: scans pieces of a big segment (`piece-scan.ts`), taking each next piece off the
 * task's shared counter, and writes each piece's aggregate file itself, so that only small replies
 * (the piece's digest and outcome) cross back. It says when the counter has run out.
 */
import { parentPort } from "node:worker_threads";
import { digestOf, digestToJson } from "../input/digest.js";
import { outcomeOf } from "../input/pieces.js";
import { type ScanScratch, scanRangeSync } from "../input/scan.js";
import { encodeAggregateParts, writeAggregateFile } from "./index-format.js";
import type { ScanTask, WorkerReply } from "./scan-worker-protocol.js";

const port = parentPort;
if (port === null) throw new Error("scan-worker runs as a worker thread (the analysis starts it)");

const scratch: ScanScratch = { buf: null };

port.on("message", (task: ScanTask) => {
  const next = new Int32Array(task.counter);
  const segment = { path: task.path, hint: task.hint, defaultSessionId: task.defaultSessionId };
  for (;;) {
    const piece = Atomics.add(next, 0, 1);
    if (piece >= task.ranges.length) break;
    const [start, end] = task.ranges[piece]!;
    let reply: WorkerReply = { id: task.id, piece, outcome: null, digest: null };
    try {
      const scan = scanRangeSync(segment, { start, end, lineOffset: 0 }, undefined, scratch);
      writeAggregateFile(task.files[piece]!, encodeAggregateParts(scan.aggregate, task.stamps[piece]!));
      reply = {
        id: task.id,
        piece,
        outcome: outcomeOf(scan),
        digest: digestToJson(digestOf(scan.aggregate)),
      };
    } catch {
      // The main thread scans the piece again and meets the error itself.
    }
    port.postMessage(reply);
  }
  port.postMessage({ id: task.id, piece: -1, outcome: null, digest: null } satisfies WorkerReply);
});
