import { bench, group, run, summary } from "mitata";
import { processCollector } from "../src/collectors/process-collector.js";

// Cost of one process-collector reading on the calling thread (goal: <= 5 us).
const procfs = processCollector();
const portable = processCollector({ procfs: false });
const rssOnly = processCollector({ arrayBuffersEveryN: 0 });

group("process collector", () => {
  summary(() => {
    bench("process/sample (statm, array buffers every 20th)", () => procfs.sample());
    bench("process/sample (statm, no array buffers)", () => rssOnly.sample());
    bench("process/sample (process.memoryUsage.rss)", () => portable.sample());
    bench("process/baseline process.memoryUsage()", () => process.memoryUsage());
  });
});

await run();
procfs.close();
portable.close();
rssOnly.close();
