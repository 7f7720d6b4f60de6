import type { ChildProcess } from "node:child_process";
import { constants } from "node:os";
import { resolve } from "node:path";
import {
  type DistributedIdentityInput,
  formatBytes,
  type MemoryCollector,
  resolveDistributedIdentity,
  type TelemetryEvent,
} from "@stormlog/core";
import { type SinkDiagnostics, TelemetrySink, type TelemetrySinkOptions } from "@stormlog/sink";
import { resolveSinkConfig } from "@stormlog/sink/internal";
import type { TrackerStatistics } from "@stormlog/tracker";
import {
  type CommandHelp,
  formatCommandHelp,
  numberFlag,
  type ParsedArgs,
  parseCommandArgs,
  stringFlag,
} from "../args.js";
import { type ChildProcessCollector, childProcessCollector } from "../child-collector.js";
import { CliUsageError } from "../errors.js";
import { shown, terminalWhole } from "../format.js";
import type { CliIo, CliSignal } from "../io.js";
import { exportTrackedSession, WANDB_OPTIONS, wandbRequested, wandbSettings } from "../wandb.js";
import type { Command } from "./command.js";

const MIB = 1024 * 1024;

const help: CommandHelp = {
  name: "track",
  summary: "Run a command and record its memory (child RSS, GPU through NVML) into a sink.",
  usage: "stormlog track [options] -- <command> [args...]",
  description:
    "Runs <command> as a child process and samples, every --interval seconds, the child's resident\n" +
    "memory (with its descendants, from /proc) and, when NVML is present, the GPU's device memory and\n" +
    "the child's share of it. Records go to an append-only sink directory the Python Stormlog reads too.\n" +
    "Ctrl+C is passed to the child (a second Ctrl+C kills it); tracking then stops cleanly: the session\n" +
    "is closed and the summary printed (peak, events, collector health, sink counters). The exit code\n" +
    "is the child's (128 + signal number when a signal ended it). Without a command, --duration seconds\n" +
    "of GPU memory are recorded.",
  options: {
    interval: { type: "string", value: "SEC", description: "Seconds between samples.", default: "0.1" },
    duration: {
      type: "string",
      value: "SEC",
      description: "Stop after SEC seconds (the child gets SIGTERM).",
    },
    "warning-threshold": {
      type: "string",
      value: "PCT",
      description: "Device usage % raising a warning.",
      default: "80",
    },
    "critical-threshold": {
      type: "string",
      value: "PCT",
      description: "Device usage % raising a critical alert.",
      default: "95",
    },
    device: {
      type: "string",
      value: "INDEX",
      description: "GPU (CUDA index) that NVML reads.",
      default: "0",
    },
    "no-gpu": { type: "boolean", description: "Do not sample the GPU even if NVML is present." },
    report: {
      type: "string",
      value: "FILE",
      description: "When tracking stops, write the session's HTML report to FILE (as 'stormlog report').",
    },
    "telemetry-sink-dir": {
      type: "string",
      value: "DIR",
      description: "Sink directory.",
      default: "./stormlog-sink",
    },
    "telemetry-flush-seconds": {
      type: "string",
      value: "SEC",
      description: "Flush at least this often.",
      default: "2.0",
    },
    "telemetry-rollover-mb": {
      type: "string",
      value: "MB",
      description: "Close a segment at this size.",
      default: "64",
    },
    "telemetry-retention-files": {
      type: "string",
      value: "N",
      description: "Keep at most N segments.",
      default: "8",
    },
    "telemetry-retention-total-mb": {
      type: "string",
      value: "MB",
      description: "Keep at most MB of segments.",
      default: "512",
    },
    "job-id": {
      type: "string",
      value: "ID",
      description: "Distributed job id (default: from the launcher's environment).",
    },
    rank: {
      type: "string",
      value: "N",
      description: "Global rank (default: RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID).",
    },
    "local-rank": { type: "string", value: "N", description: "Rank on this host." },
    "world-size": { type: "string", value: "N", description: "Number of ranks." },
    "prometheus-port": {
      type: "string",
      value: "PORT",
      description:
        "Serve live metrics for Prometheus at http://HOST:PORT/metrics while tracking (0: a free port).",
    },
    "prometheus-host": {
      type: "string",
      value: "HOST",
      description: "Address the metrics endpoint listens on (0.0.0.0 for scrapes from other hosts).",
      default: "127.0.0.1",
    },
    ...WANDB_OPTIONS,
  },
  examples: [
    "stormlog track -- node train.js --epochs 3",
    "stormlog track --interval 0.5 --telemetry-sink-dir ./sink-rank0 --rank 0 --world-size 4 -- node worker.js",
    "stormlog track --duration 30 --device 1",
  ],
};

/** Splits `[flags] -- <command...>`; without `--`, the command starts at the first non-flag argument. */
export function splitTrackArgs(argv: readonly string[]): { flags: string[]; command: string[] } {
  const separator = argv.indexOf("--");
  if (separator >= 0) return { flags: argv.slice(0, separator), command: argv.slice(separator + 1) };
  let index = 0;
  while (index < argv.length) {
    const token = argv[index]!;
    if (!token.startsWith("-") || token === "-") break;
    const name = token.replace(/^--?/, "").split("=")[0]!;
    const spec = help.options[name] ?? Object.values(help.options).find((option) => option.short === name);
    index += spec?.type === "string" && !token.includes("=") ? 2 : 1;
  }
  return { flags: argv.slice(0, index), command: argv.slice(index) };
}

interface TrackSettings {
  readonly intervalMs: number;
  readonly durationMs: number | undefined;
  readonly warningPercent: number;
  readonly criticalPercent: number;
  readonly deviceIndex: number;
  readonly gpu: boolean;
  readonly sink: TelemetrySinkOptions;
  readonly identity: DistributedIdentityInput;
  /** `--prometheus-port`/`--prometheus-host`, or null: no metrics endpoint. */
  readonly prometheus: { readonly host: string; readonly port: number } | null;
}

function settings(args: ParsedArgs, io: CliIo, stderrWarn: (message: string) => void): TrackSettings {
  const n = (name: string, bounds: Parameters<typeof numberFlag>[3]) => numberFlag(help, args, name, bounds);
  const warningPercent = n("warning-threshold", { min: 0 }) ?? 80;
  const criticalPercent = n("critical-threshold", { min: 0 }) ?? 95;
  if (criticalPercent < warningPercent) {
    throw new CliUsageError(
      `--critical-threshold (${criticalPercent}) is below --warning-threshold (${warningPercent})`,
      "pass a critical threshold >= the warning threshold",
    );
  }
  const rolloverMb = n("telemetry-rollover-mb", { exclusiveMin: 0 }) ?? 64;
  const retentionMb = n("telemetry-retention-total-mb", { exclusiveMin: 0 }) ?? 512;
  if (retentionMb < rolloverMb) {
    throw new CliUsageError(
      `--telemetry-retention-total-mb (${retentionMb}) is below --telemetry-rollover-mb (${rolloverMb})`,
      "keep at least one full segment: retention >= rollover",
    );
  }
  const sink: TelemetrySinkOptions = {
    rootDir: resolve(io.cwd, stringFlag(args, "telemetry-sink-dir") ?? "stormlog-sink"),
    flushEverySeconds: n("telemetry-flush-seconds", { exclusiveMin: 0 }) ?? 2,
    rolloverMaxBytes: Math.max(1, Math.round(rolloverMb * MIB)),
    retentionMaxFiles: n("telemetry-retention-files", { min: 1, integer: true }) ?? 8,
    retentionMaxTotalBytes: Math.max(1, Math.round(retentionMb * MIB)),
    handleProcessExit: false,
    source: "stormlog.tracker",
    logger: { warn: stderrWarn },
  };
  // Checks the sink options now, before anything runs (InvalidConfigError names the option).
  resolveSinkConfig(sink);
  const identity: DistributedIdentityInput = {};
  const jobId = stringFlag(args, "job-id");
  if (jobId !== undefined) identity.jobId = jobId;
  const rank = n("rank", { min: 0, integer: true });
  if (rank !== undefined) identity.rank = rank;
  const localRank = n("local-rank", { min: 0, integer: true });
  if (localRank !== undefined) identity.localRank = localRank;
  const worldSize = n("world-size", { min: 1, integer: true });
  if (worldSize !== undefined) identity.worldSize = worldSize;
  const resolved = resolveDistributedIdentity(identity, { env: io.env });
  // Names the directory this rank writes beside another live rank's (see onLockedDirectory).
  if (rank !== undefined || resolved.world_size > 1) sink.rank = resolved.rank;
  const prometheusPort = n("prometheus-port", { min: 0, max: 65535, integer: true });
  return {
    intervalMs: (n("interval", { exclusiveMin: 0 }) ?? 0.1) * 1000,
    durationMs: ((value) => (value === undefined ? undefined : value * 1000))(
      n("duration", { exclusiveMin: 0 }),
    ),
    warningPercent,
    criticalPercent,
    deviceIndex: n("device", { min: 0, integer: true }) ?? 0,
    gpu: args.values["no-gpu"] !== true,
    sink,
    identity,
    prometheus:
      prometheusPort === undefined
        ? null
        : { host: stringFlag(args, "prometheus-host") ?? "127.0.0.1", port: prometheusPort },
  };
}

/**
 * Starts the child; resolves once it runs, rejects with the spawn error (ENOENT...). `node:child_process`
 * (and the net stack it loads) is imported here, not at start-up: other commands never need it.
 */
async function startChild(command: readonly string[], io: CliIo): Promise<ChildProcess> {
  const { spawn } = await import("node:child_process");
  return new Promise((done, fail) => {
    const child = spawn(command[0]!, command.slice(1), { stdio: "inherit", cwd: io.cwd, env: { ...io.env } });
    child.once("error", fail);
    child.once("spawn", () => {
      child.off("error", fail);
      done(child);
    });
  });
}

function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  if (signal !== null) return 128 + (constants.signals[signal] ?? 0);
  return 1;
}

function clock(ns: bigint): string {
  return new Date(Number(ns / 1_000_000n)).toISOString().slice(11, 19);
}

async function gpuCollector(
  settings: TrackSettings,
  pid: number | undefined,
): Promise<
  { collector: MemoryCollector & { close?(): unknown }; note: string } | { collector: null; note: string }
> {
  if (!settings.gpu) return { collector: null, note: "GPU: not sampled (--no-gpu)" };
  try {
    const { nvmlCollector } = await import("@stormlog/adapter-cuda");
    const collector = nvmlCollector({
      deviceIndex: settings.deviceIndex,
      ...(pid === undefined ? {} : { pid }),
    });
    const availability = collector.availability();
    if (!availability.available) {
      await collector.close();
      // The adapter lists every library path it tried: one short line is enough here.
      const reason = /\(tried /.test(availability.reason)
        ? "NVML unavailable: no NVIDIA driver library could be loaded; set STORMLOG_NVML_LIBRARY if one is installed"
        : availability.reason.length > 160
          ? `${availability.reason.slice(0, 157)}...`
          : availability.reason;
      return { collector: null, note: `GPU: not sampled (${reason})` };
    }
    const device = collector.device;
    return { collector, note: `GPU: ${device?.name ?? `device ${settings.deviceIndex}`} through NVML` };
  } catch (error) {
    return {
      collector: null,
      note: `GPU: not sampled (NVML adapter failed to load: ${(error as Error).message})`,
    };
  }
}

interface Outcome {
  readonly exitCode: number;
  readonly reason: string;
}

async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const { flags, command } = splitTrackArgs(argv);
  const args = parseCommandArgs(help, flags);
  if (args.values.help) {
    io.stdout.write(formatCommandHelp(help));
    return 0;
  }
  if (args.positionals.length > 0) {
    throw new CliUsageError(`unexpected argument '${args.positionals[0]}'`, "put the command after --");
  }
  const say = (message: string) => io.stderr.write(`[stormlog] ${message}\n`);
  const config = settings(args, io, (message) => say(`sink: ${message}`));
  // A bad W&B flag is an error now, not after the whole run (the export reads the flags again then).
  if (wandbRequested(args)) await wandbSettings(help, args, io.cwd);
  if (command.length === 0 && config.durationMs === undefined) {
    throw new CliUsageError(
      "missing command: stormlog track [options] -- <command> [args...]",
      "give the command to run after --, or --duration SEC to record GPU memory alone",
    );
  }

  // Listening first: a port in use is an error before anything runs.
  const endpoint =
    config.prometheus === null
      ? null
      : await (await import("../prometheus.js")).serveMetrics(config.prometheus.host, config.prometheus.port);
  let child: ChildProcess | null = null;
  if (command.length > 0) {
    try {
      child = await startChild(command, io);
    } catch (error) {
      await endpoint?.close();
      const code = (error as NodeJS.ErrnoException).code;
      const why =
        code === "ENOENT"
          ? "command not found"
          : code === "EACCES"
            ? "permission denied"
            : (error as Error).message;
      io.stderr.write(`stormlog track: cannot run '${command[0]}': ${why}\n`);
      return code === "ENOENT" ? 127 : 126;
    }
  }
  const exited =
    child === null
      ? null
      : new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => {
          child!.once("exit", (code, signal) => done({ code, signal }));
        });
  const running = () => child !== null && child.exitCode === null && child.signalCode === null;

  // Signals are handled from here on: Ctrl+C must never kill the CLI before the session is closed.
  let stopReason: string | null = null;
  /** How the command ended, for the `stop` record: the recording is complete, the workload may not be. */
  let workloadExit: { workload_exit_code: number | null; workload_signal: string | null } | null = null;
  let requestStop: () => void = () => undefined;
  const stopped = new Promise<void>((done) => {
    requestStop = done;
  });
  let signals = 0;
  const unsubscribe = io.onSignal((signal: CliSignal) => {
    signals++;
    if (!running()) {
      stopReason ??= `stopped by ${signal}`;
      requestStop();
      return;
    }
    if (signals === 1) {
      say(`${signal}: passing it to pid ${child!.pid} and waiting for it to exit (Ctrl+C again to kill it)`);
      child!.kill(signal);
    } else {
      say(`${signal} again: killing pid ${child!.pid}`);
      child!.kill("SIGKILL");
    }
  });
  const timers: NodeJS.Timeout[] = [];
  if (config.durationMs !== undefined) {
    timers.push(
      setTimeout(() => {
        if (!running()) {
          stopReason ??= "--duration reached";
          requestStop();
          return;
        }
        say(`--duration reached: stopping pid ${child!.pid} (SIGTERM; SIGKILL in 10 s)`);
        child!.kill("SIGTERM");
        timers.push(setTimeout(() => running() && child!.kill("SIGKILL"), 10_000));
      }, config.durationMs),
    );
  }

  let tracker: InstanceType<typeof import("@stormlog/tracker").MemoryTracker> | null = null;
  let gpu: Awaited<ReturnType<typeof gpuCollector>> = { collector: null, note: "" };
  let childCollector: ChildProcessCollector | null = null;
  let sink: TelemetrySink | null = null;
  let exitCode = 0;
  const startedAt = process.hrtime.bigint();
  try {
    const collectors: MemoryCollector[] = [];
    const notes: string[] = [];
    gpu = await gpuCollector(config, child?.pid);
    notes.push(gpu.note);
    if (gpu.collector !== null) collectors.push(gpu.collector);
    if (child?.pid !== undefined) {
      childCollector = childProcessCollector(exited === null ? {} : { exited });
      childCollector.attach(child.pid);
      const availability = childCollector.availability();
      if (availability.available) {
        collectors.push(childCollector);
        notes.push(`host: resident memory of pid ${child.pid} and its descendants`);
      } else {
        notes.push(
          `host: not sampled (${running() ? availability.reason : "the command exited before the first sample"})`,
        );
      }
    }
    if (collectors.length === 0 && child === null) {
      throw new CliUsageError(`nothing to record: ${gpu.note}`, "give a command to run after --");
    }

    if (endpoint !== null) notes.push(`metrics: ${endpoint.url} (Prometheus text format)`);
    const { MemoryTracker } = await import("@stormlog/tracker");
    sink = new TelemetrySink(config.sink);
    tracker = new MemoryTracker({
      collectors,
      samplingIntervalMs: config.intervalMs,
      thresholds: {
        memoryWarningPercent: config.warningPercent,
        memoryCriticalPercent: config.criticalPercent,
      },
      identity: config.identity,
      env: io.env,
      sink,
      metrics: endpoint === null ? false : { meterProvider: endpoint.meterProvider },
      handleProcessExit: false,
      registerGlobal: false,
      ...(child?.pid === undefined ? {} : { pid: child.pid }),
      logger: { warn: (message) => say(message) },
    });
    tracker.addAlertCallback((record: TelemetryEvent) => {
      say(`${clock(record.timestamp_ns)} ${record.event_type.toUpperCase()}: ${record.context ?? ""}`);
    });
    await tracker.start();
    say(
      `recording ${child === null ? "GPU memory" : `'${command.join(" ")}' (pid ${child.pid})`} into ` +
        `${sink.rootDir} every ${config.intervalMs / 1000} s; session ${tracker.getSessionSummary()?.session_id ?? "-"}`,
    );
    for (const note of notes) say(`  ${note}`);

    if (exited !== null) {
      const { code, signal } = await exited;
      exitCode = exitCodeOf(code, signal);
      stopReason = signal !== null ? `ended by ${signal}` : `exited with code ${code}`;
      workloadExit = { workload_exit_code: code, workload_signal: signal };
    } else {
      await stopped;
    }
  } finally {
    for (const timer of timers) clearTimeout(timer);
    await tracker?.stop({
      ...(stopReason === null ? {} : { reason: stopReason }),
      ...(workloadExit === null ? {} : { metadata: workloadExit }),
    });
    await endpoint?.close();
    await (gpu.collector?.close?.() as Promise<void> | undefined);
    childCollector?.close();
    if (tracker === null && running()) {
      // Setting up failed after the child started: do not leave it behind.
      child!.kill("SIGTERM");
      await exited;
    }
    unsubscribe();
  }
  const elapsedS = Number(process.hrtime.bigint() - startedAt) / 1e9;
  io.stderr.write(
    formatSummary({
      command,
      childPid: child?.pid,
      outcome: { exitCode, reason: stopReason ?? "stopped" },
      elapsedS,
      statistics: tracker!.getStatistics(),
      sink: sink!.getDiagnostics(),
      sinkDir: sink!.rootDir,
      sinkRoot: config.sink.rootDir,
      sessionId: tracker!.getSessionSummary()?.session_id ?? null,
      sessionStatus: tracker!.getSessionSummary()?.status ?? null,
      peakRssBytes: childCollector?.peakRssBytes ?? null,
    }),
  );
  const reportFile = stringFlag(args, "report");
  if (reportFile !== undefined)
    await writeSessionReport(
      io,
      sink!.rootDir,
      tracker!.getSessionSummary()?.session_id,
      resolve(io.cwd, reportFile),
    );
  if (wandbRequested(args)) {
    // Like --report: the recording is complete whatever happens here; a failure is said on stderr.
    try {
      await exportTrackedSession(io, help, args, {
        sinkDir: sink!.rootDir,
        sessionId: tracker!.getSessionSummary()?.session_id,
        statistics: tracker!.getStatistics(),
      });
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      io.stderr.write(`stormlog track: the W&B export failed: ${message}\n`);
    }
  }
  return exitCode;
}

/**
 * `--report FILE`: the session's HTML page, from the sink it was written to. A failure is said on
 * stderr and leaves the exit code the child's: the recording itself is complete.
 */
async function writeSessionReport(
  io: CliIo,
  sinkDir: string,
  sessionId: string | undefined,
  file: string,
): Promise<void> {
  try {
    const { writeReport } = await import("@stormlog/report");
    const report = await writeReport(sinkDir, file, sessionId === undefined ? {} : { sessionId });
    io.stderr.write(`Report: ${terminalWhole(file)} (${(report.bytes / 1048576).toFixed(2)} MB)\n`);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    io.stderr.write(`stormlog track: could not write the report ${shown(file)}: ${shown(message)}\n`);
  }
}

interface SummaryInput {
  readonly command: readonly string[];
  readonly childPid: number | undefined;
  readonly outcome: Outcome;
  readonly elapsedS: number;
  readonly statistics: TrackerStatistics;
  readonly sink: SinkDiagnostics;
  readonly sinkDir: string;
  /** The directory given: `sinkDir`, or its parent when this process wrote beside a live writer. */
  readonly sinkRoot: string;
  readonly sessionId: string | null;
  readonly sessionStatus: string | null;
  readonly peakRssBytes: number | null;
}

/** The tracking summary (the reference's "Tracking Summary", with the sink's counters). */
export function formatSummary(input: SummaryInput): string {
  const { statistics: stats, sink } = input;
  const lines = ["", "Stormlog tracking summary"];
  const row = (label: string, value: string) => lines.push(`  ${`${label}:`.padEnd(18)}${value}`);
  if (input.command.length > 0)
    row("Command", `${input.command.join(" ")} (pid ${input.childPid ?? "-"}, ${input.outcome.reason})`);
  else row("Stopped", input.outcome.reason);
  row("Duration", `${input.elapsedS.toFixed(2)} s`);
  row("Session", `${input.sessionId ?? "-"} (${input.sessionStatus ?? "-"})`);
  for (const device of stats.devices) {
    if (device.deviceId < 0) {
      const peak = device.peakMemory ?? device.peakDeviceUsed;
      const hwm =
        input.peakRssBytes === null ? "" : `; process peak RSS (VmHWM) ${formatBytes(input.peakRssBytes)}`;
      row("Peak host memory", `${formatBytes(peak)} resident (sampled, process tree)${hwm}`);
    } else {
      const total = device.deviceTotal === null ? "" : ` of ${formatBytes(device.deviceTotal)}`;
      row(`Peak GPU ${device.deviceId}`, `${formatBytes(device.peakDeviceUsed)} device used${total}`);
    }
  }
  row(
    "Events",
    `${sink.written_events} written, ${sink.dropped_events} dropped; ${stats.alertCount} alert${stats.alertCount === 1 ? "" : "s"}`,
  );
  const health = stats.collectors
    .map(
      (collector) =>
        `${collector.name}${collector.deviceId >= 0 ? `[${collector.deviceId}]` : ""} ${collector.collectorHealthStatus}`,
    )
    .join(", ");
  row("Collector health", `${stats.collectorHealthStatus}${health ? ` (${health})` : ""}`);
  if (stats.collectorLastError !== null) row("Last error", stats.collectorLastError);
  row(
    "Sink",
    `${shown(input.sinkDir)}: ${sink.final_retained_files} segment${sink.final_retained_files === 1 ? "" : "s"}, ` +
      `${formatBytes(sink.final_retained_bytes)}; rollovers ${sink.rollover_count}, pruned ${sink.pruned_segment_count} ` +
      `(${formatBytes(sink.pruned_bytes)})${sink.last_error ? `; last error: ${sink.last_error}` : ""}`,
  );
  lines.push("", `Next: stormlog analyze ${terminalWhole(input.sinkRoot)}`, "");
  return lines.join("\n");
}

/** `stormlog track`. */
export const trackCommand: Command = { help, run };
