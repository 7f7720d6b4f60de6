import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeReport } from "../src/index.js";
import { countColoredPixels, openReport } from "./page-support.js";
import { launchChromium, writeRun } from "./support.js";

// The page in real headless Chromium, opened from file://.

const OUTER = "</script><script>window.__pwned = 1</script>";
const INNER = '<img src=x onerror="window.__pwned2 = 1">';
let browser: Browser;
let dir: string;
let file: string;
let endS: number;

beforeAll(async () => {
  browser = await launchChromium();
  const run = writeRun({ outer: OUTER, inner: INNER, alertContext: "<script>window.__pwned3 = 1</script>" });
  dir = dirname(run);
  file = join(dir, "report.html");
  const report = await writeReport(run, file);
  endS = report.data.timeline.endS;
});
afterAll(async () => {
  await browser?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the report page", () => {
  it("loads from file:// with no console error and no request but its own file", async () => {
    const { page, problems, requests, ready } = await openReport(browser, file);
    expect(problems).toEqual([]);
    expect(requests).toEqual([page.url()]);
    expect(ready.ranks).toBe(1);
    expect(ready.charts).toBe(1);
    await page.close();
  });

  it("draws the timeline: the chart's screenshot holds the series' colours", async () => {
    const { page } = await openReport(browser, file);
    const chart = page.locator(".rank .chart").first();
    const png = await chart.screenshot();
    // allocated #2563eb, device used #dc2626
    expect(await countColoredPixels(browser, png, [0x25, 0x63, 0xeb])).toBeGreaterThan(200);
    expect(await countColoredPixels(browser, png, [0xdc, 0x26, 0x26])).toBeGreaterThan(200);
    // The phase bands are drawn under it: most of their canvas is not white.
    const bands = page.locator(".rank canvas.bands").first();
    const box = (await bands.boundingBox())!;
    const white = await countColoredPixels(browser, await bands.screenshot(), [255, 255, 255], 10);
    expect(box.height).toBe(24);
    expect(white).toBeLessThan(box.width * box.height * 0.5);
    await page.close();
  });

  it("shows the phase path and exact values under the pointer", async () => {
    const { page } = await openReport(browser, file);
    const over = (await page.locator(".rank .u-over").first().boundingBox())!;
    // The fixture's inner phase runs from sample 5 to 25 of every 40 (10 ms apart): 2.15 s is inside one.
    await page.mouse.move(over.x + (over.width * 2.15) / endS, over.y + over.height / 2);
    const readout = page.locator(".rank .readout").first();
    await expect.poll(() => readout.textContent()).toContain(`phase: ${OUTER} / ${INNER}`);
    expect(await readout.textContent()).toMatch(/allocated [\d.]+ MB \([\d,]+ B\)/);
    // The same phase from its band under the chart (depth 2: the second row).
    const bands = (await page.locator(".rank canvas.bands").first().boundingBox())!;
    await page.mouse.move(over.x + (over.width * 2.15) / endS, bands.y + 18);
    await expect
      .poll(async () => ((await readout.textContent()) ?? "").startsWith(`phase: ${OUTER} / ${INNER}`))
      .toBe(true);
    expect(await readout.textContent()).toMatch(/ s to [\d.]+ s \(\d+ ms\)$/);
    await page.close();
  });

  it("zooms with the wheel around the pointer and resets", async () => {
    const { page, problems } = await openReport(browser, file);
    const over = (await page.locator(".rank .u-over").first().boundingBox())!;
    const readout = page.locator(".rank .readout").first();
    const timeAt = async (fraction: number): Promise<number> => {
      await page.mouse.move(over.x + over.width * fraction, over.y + over.height / 2);
      const text = (await readout.textContent()) ?? "";
      return Number(/t = (-?[\d.]+) s/.exec(text)?.[1]);
    };
    const before = await timeAt(0.9);
    expect(before).toBeCloseTo(endS * 0.9, 1);
    await page.mouse.move(over.x + over.width * 0.5, over.y + over.height / 2);
    await page.mouse.wheel(0, -100);
    await page.mouse.wheel(0, -100);
    // Zoomed in around the middle: the same pixel near the right edge now reads an earlier time.
    const zoomed = await timeAt(0.9);
    expect(zoomed).toBeLessThan(before - 0.2);
    expect(zoomed).toBeGreaterThan(endS * 0.5);
    await page.getByRole("button", { name: "reset" }).click();
    expect(await timeAt(0.9)).toBeCloseTo(before, 2);
    expect(problems).toEqual([]);
    await page.close();
  });

  it("hides a series on every chart from the legend, and the readout leaves it out", async () => {
    const { page, problems } = await openReport(browser, file);
    const over = (await page.locator(".rank .u-over").first().boundingBox())!;
    const readout = page.locator(".rank .readout").first();
    await page.getByRole("button", { name: "device used" }).click();
    expect(await page.getByRole("button", { name: "device used" }).getAttribute("aria-pressed")).toBe(
      "false",
    );
    await page.mouse.move(over.x + over.width / 2, over.y + over.height / 2);
    await expect.poll(() => readout.textContent()).toContain("allocated");
    expect(await readout.textContent()).not.toContain("device used");
    const png = await page.locator(".rank .chart").first().screenshot();
    expect(await countColoredPixels(browser, png, [0xdc, 0x26, 0x26], 30)).toBeLessThan(20);
    expect(problems).toEqual([]);
    await page.close();
  });

  it("says so when a rank has no memory reading, without an error", async () => {
    const empty = join(dir, "empty.jsonl");
    const lines = readFileSync(join(dir, "run.jsonl"), "utf8").split("\n");
    writeFileSync(empty, `${lines.filter((line) => /"event_type": "(start|stop)"/.test(line)).join("\n")}\n`);
    const page = join(dir, "empty.html");
    await writeReport(empty, page);
    const opened = await openReport(browser, page);
    expect(opened.problems).toEqual([]);
    expect(opened.ready.charts).toBe(0);
    expect(await opened.page.locator(".rank .empty").textContent()).toBe("No memory reading on this rank.");
    await opened.page.close();
  });

  it("runs nothing from the input: hostile phase names and contexts are text", async () => {
    const { page, problems } = await openReport(browser, file);
    expect(
      await page.evaluate("[typeof window.__pwned, typeof window.__pwned2, typeof window.__pwned3]"),
    ).toEqual(["undefined", "undefined", "undefined"]);
    expect(await page.locator("img").count()).toBe(0);
    expect(await page.locator("script").count()).toBe(3);
    expect(await page.locator("#phases td").first().textContent()).toBe(OUTER);
    expect(await page.locator("#alerts").textContent()).toContain("<script>window.__pwned3 = 1</script>");
    expect(problems).toEqual([]);
    await page.close();
  });
});
