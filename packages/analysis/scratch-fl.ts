import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { decodeTelemetryLine } from "@stormlog/core";
import { CanonicalLineReader } from "./src/fast-line.js";
const root = "/tmp/slb/mr64";
const files = readdirSync(root).flatMap((d) => readdirSync(join(root, d)).filter((f) => f.endsWith(".jsonl")).map((f) => join(root, d, f)));
const r = new CanonicalLineReader();
let t = performance.now(); let ok = 0, bad = 0, bytes = 0;
for (const f of files) { const b = readFileSync(f); bytes += b.length; let s = 0; for (;;) { const e = b.indexOf(10, s); if (e < 0) break; if (r.read(b, s, e)) ok++; else bad++; s = e + 1; } }
const dt = performance.now() - t;
console.log("fast", dt.toFixed(0), "ms", ok, bad, (dt*1000/(ok+bad)).toFixed(3), "us/line", (bytes/dt/1000).toFixed(0), "MB/s");
// check equality on first 3 files
let checked = 0;
for (const f of files.slice(0, 3)) { const b = readFileSync(f); let s = 0; for (;;) { const e = b.indexOf(10, s); if (e < 0) break; const okk = r.read(b, s, e); const rec: any = decodeTelemetryLine(b.toString("utf8", s, e));
  if (okk) { const m = (x: any) => x === null ? NaN : x; 
   const pairs: any[] = [[r.allocated, rec.allocator_allocated_bytes],[r.reserved, rec.allocator_reserved_bytes],[r.used, rec.device_used_bytes],[r.total, m(rec.device_total_bytes)],[r.free, m(rec.device_free_bytes)],[r.active, m(rec.allocator_active_bytes)],[r.timestampNs, rec.timestamp_ns],[r.sessionId, rec.session_id],[r.eventType, rec.event_type],[r.host, rec.host],[r.jobId, rec.job_id],[r.rank, rec.rank],[r.pid, rec.pid],[r.worldSize, rec.world_size],[r.context(), rec.context],[r.tensors, m(rec.metadata.tfjs_num_tensors ?? null)]];
   for (const [a, b2] of pairs) if (!Object.is(a, b2)) { console.log("MISMATCH", a, b2); process.exit(1); }
   const meta = JSON.parse(b.toString("utf8", r.metadataStart, r.metadataEnd)); if (JSON.stringify(meta) !== JSON.stringify(rec.metadata)) { console.log("META MISMATCH"); process.exit(1);} checked++; }
  s = e + 1; } }
console.log("checked", checked);
