/**
 * The sink worker: the `TelemetrySink`s of the process's `OffThreadSink`s, on one thread of their
 * own. Stored records are read from the tracker's shared ring as it fills (`RecordRingReader`),
 * rebuilt with the tracker's own `EventStore` (the same `materialize` as on the training thread, so
 * the lines are identical), appended, and encoded and written here instead of between training steps.
 */
import { parentPort } from "node:worker_threads";
import type { TelemetryEvent } from "@stormlog/core";
import { TelemetrySink } from "@stormlog/sink";
import { describeError } from "../describe-error.js";
import { EventStore } from "../records/store.js";
import {
  type SinkWorkerReply,
  type SinkWorkerRequest,
  writeSharedDiagnostics,
} from "./off-thread-protocol.js";
import { RecordRingReader, RingWatch } from "./record-ring.js";

/**
 * How long the worker sleeps between reads of a ring when nothing wakes it. The tracker wakes it
 * when its ring is full, at `stop` and when many new objects wait; what its hand-over publishes (the
 * phases of the last few training steps) waits for this read: a wake from between training steps is
 * a system call, which doubled a hand-over's cost there (34 against 16 us). After 100 ms with nothing
 * published the worker waits `RING_IDLE_INTERVAL_MS` (an idle service wakes it 2.5 times a second,
 * not 40), and the tracker wakes an idle worker at its next publication (so every hand-over of a
 * long flush interval's hold, two a second with the default sink, pays one wake).
 */
const RING_READ_INTERVAL_MS = 25;
const RING_IDLE_INTERVAL_MS = 400;
/**
 * Records read from the ring before the sink encodes them: each waits in its queue as objects, and
 * thousands of them outlived the young generation (the worker spent a quarter of its time collecting
 * garbage when it read 8192 at a time, 8 % at 1024).
 */
const ENCODE_EVERY = 512;

const port = parentPort;
if (port === null) throw new Error("sink-worker runs as a worker thread (the tracker starts it)");
const reply = (message: SinkWorkerReply) => port.postMessage(message);

// This thread keeps the process's priority: lowered, it was starved on a busy machine and a kill lost
// more than the flush interval's records (see the tracker's README).

interface OpenSink {
  readonly id: number;
  readonly sink: TelemetrySink;
  readonly diagnostics: Float64Array;
  readonly closed: Int32Array;
  /** Above this many records waiting for the disk, reading the ring waits for a flush. */
  readonly highWater: number;
  ring: RecordRingReader | null;
  /** Hands a record read from the ring to the sink. */
  readonly append: (record: TelemetryEvent) => void;
  /** A `pull` of this sink waits in the backlog. */
  pullQueued: boolean;
  finished: boolean;
}

/** A request the worker makes itself: read the sink's ring. */
type Pull = { readonly kind: "pull"; readonly sink: number };
type Task = SinkWorkerRequest | Pull;

const sinks = new Map<number, OpenSink>();
// One record at a time is rebuilt and appended: the store needs no more room than that.
const store = new EventStore(1);
/** Requests not handled yet, in the order they came. */
const backlog: Task[] = [];
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
    id,
    sink,
    diagnostics: new Float64Array(request.diagnostics),
    closed: new Int32Array(request.closed),
    // At least one: a sink that may hold one record still reads the ring.
    highWater: Math.max(1, Math.floor(sink.getDiagnostics().max_queue_events / 2)),
    ring: null,
    append: (record) => sink.append(record),
    pullQueued: false,
    finished: false,
  };
  sinks.set(id, state);
  share(state);
  reply({ kind: "opened", sink: id });
}

/** Queues a read of the sink's ring (once). */
function queuePull(state: OpenSink): void {
  if (state.pullQueued || state.finished) return;
  state.pullQueued = true;
  enqueue({ kind: "pull", sink: state.id });
}

/** Reads the ring whenever the tracker publishes records (or a wait of `RingWatch` passed), until the sink closes. */
function watchRing(state: OpenSink, watch: RingWatch): void {
  void watch.wait().then(() => {
    if (state.finished) return;
    queuePull(state);
    watchRing(state, watch);
  });
}

/**
 * Appends what the ring holds; a sink with many records waiting for the disk is flushed first: a
 * burst (thousands of phases in a fast loop) waits in the ring and its spill chunks instead of
 * overflowing the sink's bounded queue. Returns when the ring is read, or when nothing went out (the
 * disk is failing; its retry runs on a timer, which waiting on promises here would starve): the
 * records wait in the ring for the next pull.
 */
async function pull(state: OpenSink): Promise<void> {
  const ring = state.ring;
  if (ring === null) return;
  const sink = state.sink;
  const room = () => sink.queuedEvents < ENCODE_EVERY && sink.pendingEvents < state.highWater;
  for (;;) {
    // Counted as the tracker drops them: a long pull under load keeps the manifest's losses current.
    sink.countDropped(ring.takeDropped());
    if (!ring.drain(state.append, room)) return;
    const queued = sink.queuedEvents;
    const pending = sink.pendingEvents;
    if (pending >= state.highWater) await sink.flush();
    else await sink.writeQueued();
    if (sink.queuedEvents >= queued && sink.pendingEvents >= pending) return;
  }
}

/** Appends and writes everything the ring holds now (process exit, or a close on a failing disk). */
function pullNow(state: OpenSink): void {
  const ring = state.ring;
  if (ring === null) return;
  const sink = state.sink;
  sink.countDropped(ring.takeDropped());
  // A batch at a time, written with blocking I/O: the sink's queue would drop what it cannot hold.
  while (ring.drain(state.append, () => sink.queuedEvents < ENCODE_EVERY)) {
    const queued = sink.queuedEvents;
    sink.writeQueuedSync();
    if (sink.queuedEvents >= queued) {
      // The disk fails: the sink's bounded queue takes the rest, and counts what it drops.
      ring.drain(state.append, () => true);
      return;
    }
  }
}

/** Handles one request; a `close` resolves once the session is closed. */
function handle(request: Task): Promise<void> | undefined {
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
      // The manifest naming the session is on disk before the tracker's `start()` resolves.
      return sink.flush().then(() => {
        share(state);
        reply({ kind: "session-started", sink: request.sink });
      });
    case "ring":
      state.ring = new RecordRingReader(request.buffers, request.context, store);
      watchRing(state, new RingWatch(request.buffers, RING_READ_INTERVAL_MS, RING_IDLE_INTERVAL_MS));
      break;
    case "objects":
      state.ring?.learn(request.objects);
      queuePull(state);
      break;
    case "spill":
      state.ring?.spill(request.chunk);
      queuePull(state);
      break;
    case "pull":
      state.pullQueued = false;
      return pull(state).then(() => share(state));
    case "records":
      for (const record of request.records) sink.append(record);
      break;
    case "close":
      state.finished = true;
      // What a failing disk left in the ring is appended (the sink's bounded queue counts what it drops).
      return pull(state)
        .then(() => pullNow(state))
        .then(() => sink.close(request.status))
        .then(() => {
          share(state);
          sinks.delete(request.sink);
          reply({ kind: "closed", sink: request.sink });
        });
    case "closeSync":
      state.finished = true;
      pullNow(state);
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

function handleSafely(request: Task): Promise<void> | undefined {
  try {
    return handle(request)?.catch((error: unknown) => fail(request, error));
  } catch (error) {
    fail(request, error);
    return undefined;
  }
}

function fail(request: Task, error: unknown): void {
  reply({
    kind: "failed",
    sink: request.sink,
    message: describeError(error),
  });
}

/** Handles the backlog in order, one request at a time (a pull or a close may wait for the disk). */
async function drain(): Promise<void> {
  draining = true;
  while (backlog.length > 0) {
    const request = backlog.shift() as Task;
    const handling = handleSafely(request);
    if (handling !== undefined) await handling;
  }
  draining = false;
}

function enqueue(task: Task): void {
  backlog.push(task);
  if (!draining) void drain();
}

port.on("message", (request: SinkWorkerRequest) => {
  if (request.kind === "closeSync") {
    // Process exit: the training thread waits, blocked; everything before it is handled now.
    for (const earlier of backlog.splice(0)) if (earlier.kind !== "pull") void handleSafely(earlier);
    handleSafely(request);
    return;
  }
  enqueue(request);
});
