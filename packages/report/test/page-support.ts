/** Opening a report page in headless Chromium from file://, with every request and console message recorded. */
import { pathToFileURL } from "node:url";
import type { Browser, Page } from "playwright-core";

export interface OpenedPage {
  readonly page: Page;
  /** Console errors and warnings, and uncaught page errors. */
  readonly problems: string[];
  /** Every URL the page asked for (the page's own file included). */
  readonly requests: string[];
  /** `window.__stormlogReport` once the page says it is ready. */
  readonly ready: { paintedMs: number; charts: number; ranks: number };
}

export async function openReport(browser: Browser, file: string): Promise<OpenedPage> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems: string[] = [];
  const requests: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error" || message.type() === "warning") problems.push(message.text());
  });
  page.on("pageerror", (error) => problems.push(String(error)));
  page.on("request", (request) => requests.push(request.url()));
  const url = pathToFileURL(file).href;
  // Anything but the page itself would be a request to the outside: refused, and recorded above.
  await page.route("**/*", (route) => (route.request().url() === url ? route.continue() : route.abort()));
  await page.goto(url);
  await page.waitForSelector("html[data-report-ready]", { timeout: 20_000 });
  const ready = (await page.evaluate("window.__stormlogReport")) as OpenedPage["ready"];
  return { page, problems, requests, ready };
}

/**
 * Pixels of a screenshot (PNG) whose colour is within `tolerance` of `rgb`, counted by drawing the
 * image on a canvas in a blank page of the same browser.
 */
export async function countColoredPixels(
  browser: Browser,
  png: Buffer,
  rgb: readonly [number, number, number],
  tolerance = 40,
): Promise<number> {
  const blank = await browser.newPage();
  try {
    // Browser code as text: this package's TypeScript has no DOM types.
    const script = `(async () => {
      const image = new Image();
      image.src = "data:image/png;base64,${png.toString("base64")}";
      await image.decode();
      const canvas = document.createElement("canvas");
      canvas.width = image.width;
      canvas.height = image.height;
      const ctx = canvas.getContext("2d");
      ctx.drawImage(image, 0, 0);
      const pixels = ctx.getImageData(0, 0, image.width, image.height).data;
      const [r, g, b] = ${JSON.stringify(rgb)};
      let count = 0;
      for (let i = 0; i < pixels.length; i += 4)
        if (Math.abs(pixels[i] - r) <= ${tolerance} && Math.abs(pixels[i + 1] - g) <= ${tolerance} && Math.abs(pixels[i + 2] - b) <= ${tolerance}) count++;
      return count;
    })()`;
    return (await blank.evaluate(script)) as number;
  } finally {
    await blank.close();
  }
}
