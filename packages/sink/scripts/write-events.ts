// A child process for the sink's process-level tests (crash safety, exit handling, several ranks).
// Run: node --conditions=@stormlog/source --import tsx packages/sink/scripts/write-events.ts <dir> <mode> [options]
//   modes: crash          append up to --events (default: no end) reporting progress, then idle; the
//                         parent kills it with SIGKILL
//          complete       append --events then `await sink.close()`
//          natural-exit   append --events and let the process end without closing (the exit hooks close)
//          process-exit   append --events and call process.exit(3) at once (the synchronous exit path)
//          wait           append --events, print "ready", then wait for a signal
//   options: --events N  --batch N  --rank N  --world-size N  --rollover-max-events N
//            --retention-max-files N  --no-exit-hooks
//            --per-process (write under <dir>/rank-<r>-<host>-<pid>)
import { sinkDirectoryForProcess, TelemetrySink } from "../src/index.js";
import { sampleRecord } from "./sample-records.js";

const [dir, mode = "complete", ...rest] = process.argv.slice(2);
if (dir === undefined) {
  console.error("usage: write-events.ts <dir> <mode> [options]");
  process.exit(2);
}
const flag = (name: string): boolean => rest.includes(name);
const option = (name: string, fallback: number): number => {
  const index = rest.indexOf(name);
  return index >= 0 ? Number(rest[index + 1]) : fallback;
};
const rank = option("--rank", 0);
const worldSize = option("--world-size", 1);
const events = option("--events", mode === "crash" ? Number.POSITIVE_INFINITY : 1000);
const batch = option("--batch", 200);

const rootDir = flag("--per-process") ? sinkDirectoryForProcess(dir, { rank }) : dir;
const sink = new TelemetrySink({
  rootDir,
  rolloverMaxEvents: option("--rollover-max-events", 10_000),
  retentionMaxFiles: option("--retention-max-files", 100_000),
  retentionMaxTotalBytes: 64 * 1024 ** 3,
  flushEverySeconds: 0.05,
  writeRollups: false,
  // The crash test checks that nothing is lost but the unflushed tail: the producer never waits, so the
  // queue must not overflow (overflow drops and counts, by design) even on a loaded CI machine.
  maxQueueEvents: 1 << 20,
  handleProcessExit: !flag("--no-exit-hooks"),
  logger: { warn: (message) => console.error(message) },
});
const session = sink.startSession({
  source: "stormlog.test",
  rank,
  world_size: worldSize,
  job_id: "job-sink",
});
const id = session.session_id;
console.log(`session ${id}`);

let seq = 0;
const appendBatch = (count: number): void => {
  for (let i = 0; i < count; i++) sink.append(sampleRecord(id, seq++, { rank, worldSize, pid: process.pid }));
};

if (mode === "crash") {
  let reported = -1;
  const loop = (): void => {
    if (seq < events) appendBatch(Math.min(batch, events - seq));
    const { written_events: written } = sink.getDiagnostics();
    if (written !== reported) {
      reported = written;
      // What is on disk now: a SIGKILL from here on may lose only what comes after.
      process.stdout.write(`written ${written}\n`);
    }
    if (seq < events) setImmediate(loop);
    else setTimeout(loop, 5);
  };
  loop();
} else {
  while (seq < events) {
    appendBatch(Math.min(batch, events - seq));
    await new Promise((resolve) => setImmediate(resolve));
  }
  if (mode === "complete") {
    await sink.close();
    console.log("closed");
  } else if (mode === "process-exit") {
    process.exit(3);
  } else if (mode === "wait") {
    await sink.flush();
    console.log("ready");
    setInterval(() => undefined, 1000);
  }
  // natural-exit: nothing more; the event loop runs dry and the exit hooks close the session.
}
