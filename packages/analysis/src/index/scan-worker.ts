/**
 * A scan worker: scans pieces of segments, or whole ones (`piece-scan.ts`), taking each next unit
 * off the task's shared counter, and writes each unit's aggregate file itself, so that only small
 * replies (the unit's digest and outcome) cross back. It says when the counter has run out.
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
  for (;;) {
    const unit = Atomics.add(next, 0, 1);
    if (unit >= task.units.length) break;
    const { path, hint, defaultSessionId, start, end, file, stamp } = task.units[unit]!;
    let reply: WorkerReply = { id: task.id, unit, outcome: null, digest: null };
    try {
      const scan = scanRangeSync(
        { path, hint, defaultSessionId },
        { start, end, lineOffset: 0 },
        undefined,
        scratch,
      );
      writeAggregateFile(file, encodeAggregateParts(scan.aggregate, stamp));
      reply = { id: task.id, unit, outcome: outcomeOf(scan), digest: digestToJson(digestOf(scan.aggregate)) };
    } catch {
      // The main thread scans the unit again and meets the error itself.
    }
    port.postMessage(reply);
  }
  port.postMessage({ id: task.id, unit: -1, outcome: null, digest: null } satisfies WorkerReply);
});
