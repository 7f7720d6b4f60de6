/**
 * `stormlog track --prometheus-port`: the tracker's live metrics (OpenTelemetry) served for Prometheus
 * to scrape at `/metrics`, through OpenTelemetry's own Prometheus exporter (its text format, names and
 * units as every OpenTelemetry service exposes them) behind a server of ours, so that a port in use is
 * a one-line error and port 0 tells which port it got.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { MetricsMeterProvider } from "@stormlog/tracker";
import { CliUsageError } from "./errors.js";

/** A running `/metrics` endpoint and the provider the tracker publishes through. */
export interface MetricsEndpoint {
  /** `http://host:port/metrics`, with the port actually bound. */
  readonly url: string;
  readonly meterProvider: MetricsMeterProvider;
  /** Stops serving (after tracking, once its last values were published). */
  close(): Promise<void>;
}

/** The OpenTelemetry packages `--prometheus-port` needs: optional peers (with their dependencies, ~15 MB). */
const PEERS = "@opentelemetry/api @opentelemetry/sdk-metrics@2 @opentelemetry/exporter-prometheus@0.2";

/** The exporter and the SDK, or a `CliUsageError` that says what to install. */
async function loadOpenTelemetry() {
  try {
    const [exporter, sdk] = await Promise.all([
      import("@opentelemetry/exporter-prometheus"),
      import("@opentelemetry/sdk-metrics"),
    ]);
    return { PrometheusExporter: exporter.PrometheusExporter, MeterProvider: sdk.MeterProvider };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "MODULE_NOT_FOUND" && code !== "ERR_MODULE_NOT_FOUND") throw error;
    throw new CliUsageError(
      "--prometheus-port needs OpenTelemetry's metrics SDK and Prometheus exporter, which are not installed",
      `install them beside @stormlog/cli: npm install ${PEERS}`,
    );
  }
}

/** Serves `/metrics` on `host:port` (0: a free port); rejects with a `CliUsageError` when it cannot listen. */
export async function serveMetrics(host: string, port: number): Promise<MetricsEndpoint> {
  const [{ createServer }, { PrometheusExporter, MeterProvider }] = await Promise.all([
    import("node:http"),
    loadOpenTelemetry(),
  ]);
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const meterProvider = new MeterProvider({ readers: [exporter] });
  const server: Server = createServer((request, response) => {
    const path = (request.url ?? "/").split("?")[0];
    if (request.method === "GET" && path === "/metrics") {
      exporter.getMetricsRequestHandler(request, response);
      return;
    }
    response.statusCode = 404;
    response.setHeader("content-type", "text/plain");
    response.end("stormlog serves its metrics at /metrics\n");
  });
  try {
    await new Promise<void>((listening, failed) => {
      server.once("error", failed);
      server.listen({ host, port }, () => {
        server.off("error", failed);
        listening();
      });
    });
  } catch (error) {
    await meterProvider.shutdown().catch(() => undefined);
    const code = (error as NodeJS.ErrnoException).code;
    const why =
      code === "EADDRINUSE"
        ? "the address is in use"
        : code === "EACCES"
          ? "permission denied"
          : code === "EADDRNOTAVAIL" || code === "ENOTFOUND"
            ? "no such address on this machine"
            : (error as Error).message;
    throw new CliUsageError(
      `cannot serve metrics on ${host}:${port}: ${why}`,
      "pick another --prometheus-port (0 takes a free one) or --prometheus-host",
    );
  }
  const address = server.address() as AddressInfo;
  const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${shownHost}:${address.port}/metrics`,
    meterProvider,
    async close() {
      await new Promise<void>((closed) => {
        server.close(() => closed());
        server.closeAllConnections();
      });
      await meterProvider.shutdown().catch(() => undefined);
    },
  };
}
