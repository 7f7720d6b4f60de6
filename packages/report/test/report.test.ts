import { readFileSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  embeddedJson,
  generateReport,
  ReportOptionsError,
  type ReportPageData,
  writeReport,
} from "../src/index.js";
import { writeRun } from "./support.js";

const HOSTILE = "</script><script>globalThis.__pwned = 1</script>";
const dirs: string[] = [];
const run = (options: Parameters<typeof writeRun>[0] = {}): string => {
  const file = writeRun(options);
  dirs.push(dirname(file));
  return file;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function pageData(html: string): ReportPageData {
  const match = /<script type="application\/json" id="stormlog-data">([\s\S]*?)<\/script>/.exec(html);
  expect(match).not.toBeNull();
  return JSON.parse(match![1]!) as ReportPageData;
}

describe("embeddedJson", () => {
  it("escapes what could end a script element or a line, and reads back unchanged", () => {
    const value = { a: "</script><!-- & \u2028\u2029 >" };
    const text = embeddedJson(value);
    expect(text).not.toMatch(/[<>&\u2028\u2029]/);
    expect(JSON.parse(text)).toEqual(value);
  });
});

describe("generateReport", () => {
  it("makes one self-contained page: no URL to load, scripts allowed only by hash", async () => {
    const { html, bytes } = await generateReport(run());
    expect(bytes).toBe(Buffer.byteLength(html));
    expect(html).not.toMatch(/\b(?:src|href)\s*=/i);
    expect(html).not.toMatch(/https?:\/\/(?!github\.com\/leeoniya)/);
    expect(html).toMatch(
      /Content-Security-Policy" content="default-src 'none'; script-src 'sha256-[^']+' 'sha256-[^']+';/,
    );
    // uPlot's own script and style are inlined.
    expect(html).toContain("uPlot");
    expect(html).toContain(".uplot");
  });

  it("keeps input text out of the markup: a phase named </script> is data, escaped", async () => {
    const { html, data } = await generateReport(
      run({ outer: HOSTILE, inner: "<img src=x onerror=alert(1)>", alertContext: "<b>&amp;</b>" }),
    );
    expect(html).not.toContain("__pwned = 1</script>");
    expect(html).not.toContain("<img src=x");
    expect(html.match(/<script/g)?.length).toBe(3);
    const embedded = pageData(html);
    expect(embedded.timeline.phasePaths).toContain(HOSTILE);
    expect(embedded).toEqual(JSON.parse(JSON.stringify(data)));
    const alerts = embedded.tables.find((table) => table.id === "alerts")!;
    expect(alerts.rows.some((row) => row.includes("<b>&amp;</b>"))).toBe(true);
  });

  it("shows the analysis: cards, phases, markers, and a timeline whose peak is exact", async () => {
    const file = run({ samples: 4000 });
    const { data, analysis } = await generateReport(file, { columns: 200 });
    expect(data.cards.map((card) => card.label)).toEqual([
      "Duration",
      "Samples",
      "Peak allocated",
      "Peak reserved",
      "Peak device used",
      "Alerts",
      "Collector health",
      "Sink",
    ]);
    expect(data.cards.find((card) => card.label === "Alerts")!.tone).toBe("bad");
    const phases = data.tables.find((table) => table.id === "phases")!;
    expect(phases.rows.map((row) => row[0])).toEqual(["train", "train / forward"]);
    const [rank] = data.timeline.ranks;
    expect(rank!.rowCount).toBeGreaterThan(3000);
    expect(rank!.dt.length + 1).toBeLessThan(rank!.rowCount / 2);
    expect(rank!.markers.map((marker) => marker.kind).sort()).toEqual([
      "alert",
      "collector",
      "collector",
      "oom",
    ]);
    expect(rank!.markers.find((marker) => marker.kind === "alert")!.phase).toBe("train");
    // Decode the allocated series as the page does: its maximum is the analysis's peak, to the byte.
    const allocated = rank!.series.findIndex((series) => series.kind === "allocated");
    const { unit, d } = rank!.y[allocated]!;
    let level = 0;
    let max = -Infinity;
    for (const delta of d) {
      if (delta === null) continue;
      level += delta;
      max = Math.max(max, level * unit);
    }
    expect(max).toBe(analysis.summary.peaks.allocator_allocated_bytes!.value);
  });

  it("says what a CPU-only run's figures are", async () => {
    const { data } = await generateReport(run({ device: false }));
    expect(data.cpuOnly).toBe(true);
    expect(data.cards.at(-1)!.label).toBe("CPU-only run");
  });

  it("writes the page to a file", async () => {
    const file = run();
    const out = `${dirname(file)}/report.html`;
    const written = await writeReport(file, out, { title: "My run" });
    expect(readFileSync(out, "utf8")).toBe(written.html);
    expect(written.data.title).toBe("My run");
  });

  it("rejects an out-of-range option with a typed error naming it", async () => {
    const error = await generateReport(run(), { columns: 3 }).catch((e: unknown) => e);
    expect(ReportOptionsError.isInstance(error)).toBe(true);
    expect((error as ReportOptionsError).option).toBe("columns");
    expect((error as Error).message).toMatch(/from 50 to 20000/);
  });
});
