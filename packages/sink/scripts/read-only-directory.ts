// A child process for the EACCES test: a sink whose directory turns read-only while it writes
// (permissions are not enforced for root, so the test runs this as an unprivileged user).
// Run: node --conditions=@stormlog/source --import tsx packages/sink/scripts/read-only-directory.ts <parent>
// (the test runs it bundled into one .mjs). Prints one JSON line: the sink directory, diagnostics
// during the failure and after the close, what the sink logged, and for a second session closed
// while the directory is read-only, the manifest's view of it before and after permission returns,
// and where that sink's next session goes.
import { chmodSync, existsSync, mkdtempSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { readManifestSync } from "../src/directory/manifest.js";
import { WRITER_LOCK_FILENAME } from "../src/directory/writer-lock.js";
import { TelemetrySink } from "../src/index.js";
import { sampleRecord } from "./sample-records.js";

const parent = process.argv[2];
if (parent === undefined) {
  console.error("usage: read-only-directory.ts <parent directory>");
  process.exit(2);
}
const warnings: string[] = [];
const infos: string[] = [];
const waitFor = async (condition: () => boolean, what: string): Promise<void> => {
  // Generous: on a loaded two-core machine the retries after the close are starved, not lost.
  const deadline = Date.now() + 30_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
};
const openSink = (dir: string): TelemetrySink =>
  new TelemetrySink({
    rootDir: dir,
    handleProcessExit: false,
    writeRollups: false,
    flushEveryEvents: 5,
    flushEverySeconds: 0.01,
    rolloverMaxEvents: 20,
    failureBackoffSeconds: 0.02,
    failureBackoffMaxSeconds: 0.05,
    logger: { warn: (message) => warnings.push(message), info: (message) => infos.push(message) },
  });

// 1. Read-only mid-session, writable again before the close.
const dir = mkdtempSync(join(parent, "stormlog-eacces-"));
const sink = openSink(dir);
sink.startSession({ session_id: "eacces" });
for (let i = 0; i < 20; i++) sink.append(sampleRecord("eacces", i));
await sink.flush();
chmodSync(dir, 0o555);
// The first segment is full: the next record needs a new segment, which the directory now refuses.
for (let i = 20; i < 60; i++) sink.append(sampleRecord("eacces", i));
await sink.flush();
await waitFor(() => sink.getDiagnostics().io_failures > 0, "the write to fail");
const during = sink.getDiagnostics();
const worksAgainDuring = infos.filter((line) => line.includes("works again")).length;
chmodSync(dir, 0o755);
await waitFor(() => sink.getDiagnostics().state === "ok", "the sink to recover");
for (let i = 60; i < 70; i++) sink.append(sampleRecord("eacces", i));
await sink.close();
const after = sink.getDiagnostics();
const worksAgainAfter = infos.filter((line) => line.includes("works again")).length;

// 2. Closed while read-only: the ledger follows once permission returns.
const closedDir = mkdtempSync(join(parent, "stormlog-eacces-closed-"));
const closing = openSink(closedDir);
closing.startSession({ session_id: "closed-read-only" });
for (let i = 0; i < 10; i++) closing.append(sampleRecord("closed-read-only", i));
await closing.flush();
chmodSync(closedDir, 0o555);
for (let i = 10; i < 40; i++) closing.append(sampleRecord("closed-read-only", i));
await waitFor(() => closing.getDiagnostics().io_failures > 0, "the second sink's write to fail");
await closing.close();
const whileReadOnly = readManifestSync(closedDir);
chmodSync(closedDir, 0o755);
await waitFor(
  () => readManifestSync(closedDir)?.sessions[0]?.status !== "running",
  "the closed session to reach the disk",
);
const onceWritable = readManifestSync(closedDir);
// The lock its close could not remove is still this sink's: a next session writes in the same
// directory (not beside a "live writer" that is this process) and its close removes the lock.
const lockKeptWhileReadOnly = existsSync(join(closedDir, WRITER_LOCK_FILENAME));
closing.startSession({ session_id: "after-read-only" });
for (let i = 0; i < 5; i++) closing.append(sampleRecord("after-read-only", i));
await closing.close();
const nextSession = {
  sessions: (readManifestSync(closedDir)?.sessions ?? []).map((session) => session.session_id),
  lockAfterClose: existsSync(join(closedDir, WRITER_LOCK_FILENAME)),
  entries: readdirSync(closedDir)
    .filter((name) => !name.endsWith(".jsonl"))
    .sort(),
};
console.log(
  JSON.stringify({
    dir,
    during,
    after,
    warnings,
    worksAgainDuring,
    worksAgainAfter,
    closed: {
      diagnostics: closing.getDiagnostics(),
      statusWhileReadOnly: whileReadOnly?.sessions[0]?.status ?? null,
      status: onceWritable?.sessions[0]?.status ?? null,
      endedAtNs: String(onceWritable?.sessions[0]?.ended_at_ns ?? null),
      losses: onceWritable?.session_losses ?? [],
      lockKeptWhileReadOnly,
      nextSession,
    },
  }),
);
