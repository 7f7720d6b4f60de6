import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { CanonicalLineReader } from "./src/fast-line.js";
const root = "/tmp/slb/mr64";
const files = readdirSync(root).flatMap((d) => readdirSync(join(root, d)).filter((f) => f.endsWith(".jsonl")).map((f) => join(root, d, f)));
const bufs = files.map((f) => readFileSync(f));
const r = new CanonicalLineReader();
for (let rep = 0; rep < 3; rep++) {
let t = performance.now(); let ok = 0, bad = 0, bytes = 0;
for (const b of bufs) { bytes += b.length; let s = 0; for (;;) { const e = b.indexOf(10, s); if (e < 0) break; if (r.read(b, s, e)) ok++; else bad++; s = e + 1; } }
const dt = performance.now() - t;
console.log("fast", dt.toFixed(0), "ms", ok, bad, (dt*1000/(ok+bad)).toFixed(3), "us/line", (bytes/dt/1000).toFixed(0), "MB/s");
}
let t = performance.now(); let n = 0;
for (const b of bufs) { let s = 0; for (;;) { const e = b.indexOf(10, s); if (e < 0) break; n++; s = e + 1; } }
console.log("split only", (performance.now() - t).toFixed(0));
t = performance.now(); let x = 0;
for (const b of bufs) { for (let i = 0; i < b.length; i++) x += b[i]!; }
console.log("byte loop", (performance.now() - t).toFixed(0), x);
