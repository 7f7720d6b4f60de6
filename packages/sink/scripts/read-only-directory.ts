// A child process for the EACCES test: a sink whose directory turns read-only while it writes
// (permissions are not enforced for root, so the test runs this as an unprivileged user).
// Run: node --conditions=@stormlog/source --import tsx packages/sink/scripts/read-only-directory.ts <parent>
// Prints one JSON line: the sink directory, diagnostics during the failure and after the close, and
// what the sink logged.
import { chmodSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { TelemetrySink } from "../src/index.js";
import { sampleRecord } from "./sample-records.js";

const parent = process.argv[2];
if (parent === undefined) {
  console.error("usage: read-only-directory.ts <parent directory>");
  process.exit(2);
}
const dir = mkdtempSync(join(parent, "stormlog-eacces-"));
const warnings: string[] = [];
const sink = new TelemetrySink({
  rootDir: dir,
  handleProcessExit: false,
  writeRollups: false,
  flushEveryEvents: 5,
  flushEverySeconds: 0.01,
  rolloverMaxEvents: 20,
  failureBackoffSeconds: 0.02,
  failureBackoffMaxSeconds: 0.05,
  logger: { warn: (message) => warnings.push(message), info: () => undefined },
});
const waitFor = async (condition: () => boolean, what: string): Promise<void> => {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
};

sink.startSession({ session_id: "eacces" });
for (let i = 0; i < 20; i++) sink.append(sampleRecord("eacces", i));
await sink.flush();
chmodSync(dir, 0o555);
// The first segment is full: the next record needs a new segment, which the directory now refuses.
for (let i = 20; i < 60; i++) sink.append(sampleRecord("eacces", i));
await sink.flush();
await waitFor(() => sink.getDiagnostics().io_failures > 0, "the write to fail");
const during = sink.getDiagnostics();
chmodSync(dir, 0o755);
await waitFor(() => sink.getDiagnostics().state === "ok", "the sink to recover");
for (let i = 60; i < 70; i++) sink.append(sampleRecord("eacces", i));
await sink.close();
console.log(JSON.stringify({ dir, during, after: sink.getDiagnostics(), warnings }));
