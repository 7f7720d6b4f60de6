import { analyzeTelemetry } from "/work/main/packages/analysis/src/index.js";
const path = process.argv[2]!;
const index = process.argv[3] !== "noindex";
const t = performance.now();
const report = await analyzeTelemetry(path, { index });
const dt = performance.now() - t;
console.error("analyze ms", dt.toFixed(0), "rss MB", (process.memoryUsage().rss / 1e6).toFixed(0), "maxrss MB", (process.resourceUsage().maxRSS / 1e3).toFixed(0), JSON.stringify(report.index));
