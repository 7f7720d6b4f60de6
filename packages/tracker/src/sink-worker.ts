/**
 * The sink worker: a `TelemetrySink` on its own thread, fed batches of stored records by the
 * tracker's `OffThreadSink`. It rebuilds each record with the tracker's own `EventStore` (the same
 * `materialize` as on the training thread, so the lines are identical), appends it and does the
 * sink's encoding and disk work here instead of between training steps.
 */
import { parentPort, workerData } from "node:worker_threads";
import type { SessionStatus } from "@stormlog/core";
import { type SinkLogger, TelemetrySink } from "@stormlog/sink";
import {
  type SinkWorkerData,
  type SinkWorkerReply,
  type SinkWorkerRequest,
  writeSharedDiagnostics,
} from "./off-thread-protocol.js";
import { BatchTables, EventStore, type RecordContext } from "./store.js";

const port = parentPort;
if (port === null) throw new Error("sink-worker.ts runs as a worker thread (started by the tracker)");
const data = workerData as SinkWorkerData;
const reply = (message: SinkWorkerReply) => port.postMessage(message);
const logger: SinkLogger = {
  warn: (message) => reply({ kind: "log", level: "warn", message }),
  info: (message) => reply({ kind: "log", level: "info", message }),
};
const sink = new TelemetrySink({ ...data.options, logger, handleProcessExit: false });
const diagnostics = new Float64Array(data.diagnostics);
const closed = new Int32Array(data.closed);
// One record at a time is rebuilt and handed over: the store needs no more room than that.
const store = new EventStore(1);
const tables = new BatchTables();
let context: RecordContext | null = null;

function share(): void {
  writeSharedDiagnostics(diagnostics, sink.getDiagnostics());
}

function handle(request: SinkWorkerRequest): void {
  switch (request.kind) {
    case "session":
      sink.startSession(request.summary);
      break;
    case "batch": {
      if (request.context !== undefined) context = request.context;
      const batch = request.batch;
      tables.learn(batch);
      for (let i = 0; i < batch.count; i++) {
        const index = store.unpack(batch, i, tables);
        sink.append(store.materialize(index, context as RecordContext));
      }
      break;
    }
    case "records":
      for (const record of request.records) sink.append(record);
      break;
    case "close":
      void sink.close(request.status as SessionStatus).then(() => {
        share();
        reply({ kind: "closed", id: request.id });
      });
      return;
    case "closeSync":
      sink.closeSync(request.status as SessionStatus);
      share();
      Atomics.store(closed, 0, 1);
      Atomics.notify(closed, 0);
      return;
  }
  share();
}

port.on("message", (request: SinkWorkerRequest) => {
  try {
    handle(request);
  } catch (error) {
    reply({ kind: "failed", message: error instanceof Error ? error.message : String(error) });
  }
});
share();
