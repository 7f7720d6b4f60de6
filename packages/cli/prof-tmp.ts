import { summarizeTelemetrySessions, loadTelemetrySessions, iterateTelemetryEvents } from "@stormlog/sink";
import { buildDistributedDiagnostics, loadDistributedEvents } from "@stormlog/analysis";
const p = "/tmp/bigjob/sinks";
let t = performance.now();
await summarizeTelemetrySessions(p); console.log("summarize", (performance.now()-t).toFixed(0)); t = performance.now();
let n=0; for await (const e of iterateTelemetryEvents(p)) n++; console.log("iterate", n, (performance.now()-t).toFixed(0)); t = performance.now();
const { events } = await loadDistributedEvents(p); console.log("loadDistributed", (performance.now()-t).toFixed(0)); t = performance.now();
const d = buildDistributedDiagnostics(events); console.log("build", (performance.now()-t).toFixed(0)); t = performance.now();
console.log(process.memoryUsage().rss/1e6);
