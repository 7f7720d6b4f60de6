/**
 * The sink worker: the `TelemetrySink`s of the process's `OffThreadSink`s, on one thread of their
 * own. Each batch of stored records is rebuilt with the tracker's own `EventStore` (the same
 * `materialize` as on the training thread, so the lines are identical), appended, and encoded and
 * written here instead of between training steps.
 */
import { readlinkSync } from "node:fs";
import { setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { TelemetrySink } from "@stormlog/sink";
import {
  type SinkWorkerReply,
  type SinkWorkerRequest,
  writeSharedDiagnostics,
} from "./off-thread-protocol.js";
import { BatchTables, EventStore, type RecordContext } from "./store.js";

const port = parentPort;
if (port === null) throw new Error("sink-worker runs as a worker thread (the tracker starts it)");
const reply = (message: SinkWorkerReply) => port.postMessage(message);

/**
 * Runs this thread at the lowest priority (nice 19), the process's other threads unchanged: where
 * the CPUs are busy (tfjs-node's kernels use every core), training comes first and the sink takes
 * what is left. On Linux a thread's id is a pid to setpriority; elsewhere, or if not allowed, the
 * thread keeps the normal priority.
 */
function lowerThisThreadsPriority(): void {
  try {
    const threadId = Number(readlinkSync("/proc/thread-self").split("/").pop());
    if (Number.isInteger(threadId) && threadId !== process.pid) setPriority(threadId, 19);
  } catch {
    // Not Linux, or not permitted.
  }
}
lowerThisThreadsPriority();

interface OpenSink {
  readonly sink: TelemetrySink;
  readonly tables: BatchTables;
  readonly diagnostics: Float64Array;
  readonly closed: Int32Array;
  /** Above this many records waiting for the disk, the next batch waits for a flush. */
  readonly highWater: number;
  context: RecordContext | null;
}

const sinks = new Map<number, OpenSink>();
// One record at a time is rebuilt and appended: the store needs no more room than that.
const store = new EventStore(1);
/** Requests not handled yet, in the order they came. */
const backlog: SinkWorkerRequest[] = [];
let draining = false;

function share(open: OpenSink): void {
  writeSharedDiagnostics(open.diagnostics, open.sink.getDiagnostics());
}

function open(request: Extract<SinkWorkerRequest, { kind: "open" }>): void {
  const id = request.sink;
  const sink = new TelemetrySink({
    ...request.options,
    handleProcessExit: false,
    logger: {
      warn: (message) => reply({ kind: "log", sink: id, level: "warn", message }),
      info: (message) => reply({ kind: "log", sink: id, level: "info", message }),
    },
  });
  const state: OpenSink = {
    sink,
    tables: new BatchTables(),
    diagnostics: new Float64Array(request.diagnostics),
    closed: new Int32Array(request.closed),
    highWater: Math.floor(sink.getDiagnostics().max_queue_events / 2),
    context: null,
  };
  sinks.set(id, state);
  share(state);
  reply({ kind: "opened", sink: id });
}

/** Handles one request; a `close` resolves once the session is closed. */
function handle(request: SinkWorkerRequest): Promise<void> | undefined {
  if (request.kind === "open") {
    open(request);
    return undefined;
  }
  const state = sinks.get(request.sink);
  if (state === undefined) return undefined;
  const sink = state.sink;
  switch (request.kind) {
    case "session":
      sink.startSession(request.summary);
      break;
    case "batch": {
      if (request.context !== undefined) state.context = request.context;
      const batch = request.batch;
      state.tables.learn(batch);
      for (let i = 0; i < batch.count; i++) {
        const index = store.unpack(batch, i, state.tables);
        sink.append(store.materialize(index, state.context as RecordContext));
      }
      break;
    }
    case "records":
      for (const record of request.records) sink.append(record);
      break;
    case "close":
      return sink.close(request.status).then(() => {
        share(state);
        sinks.delete(request.sink);
        reply({ kind: "closed", sink: request.sink });
      });
    case "closeSync":
      sink.closeSync(request.status);
      share(state);
      sinks.delete(request.sink);
      Atomics.store(state.closed, 0, 1);
      Atomics.notify(state.closed, 0);
      return undefined;
  }
  share(state);
  return undefined;
}

function handleSafely(request: SinkWorkerRequest): Promise<void> | undefined {
  try {
    return handle(request);
  } catch (error) {
    reply({
      kind: "failed",
      sink: request.sink,
      message: error instanceof Error ? error.message : String(error),
    });
    return undefined;
  }
}

/**
 * Handles the backlog in order. A batch for a sink with many records waiting for the disk waits for
 * a flush first: a burst of records (thousands of phases in a fast loop) waits here, in the message
 * queue, instead of overflowing the sink's bounded queue.
 */
async function drain(): Promise<void> {
  draining = true;
  while (backlog.length > 0) {
    const request = backlog[0] as SinkWorkerRequest;
    const state = request.kind === "batch" ? sinks.get(request.sink) : undefined;
    if (state !== undefined && state.sink.pendingEvents >= state.highWater) {
      await state.sink.flush();
      // A `closeSync` meanwhile handled the backlog itself.
      if (backlog[0] !== request) continue;
    }
    backlog.shift();
    const closing = handleSafely(request);
    if (closing !== undefined) await closing;
  }
  draining = false;
}

port.on("message", (request: SinkWorkerRequest) => {
  if (request.kind === "closeSync") {
    // Process exit: the training thread waits, blocked; everything before it is handled now.
    for (const earlier of backlog.splice(0)) void handleSafely(earlier);
    handleSafely(request);
    return;
  }
  backlog.push(request);
  if (!draining) void drain();
});
