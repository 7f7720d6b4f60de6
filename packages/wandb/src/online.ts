/**
 * Online streaming: with the W&B JS SDK (`@wandb/sdk`, an optional peer dependency) installed and an
 * API key present, the history, summary and config of an export also go to a live run. What the JS
 * SDK cannot carry (tables, HTML, line charts, artifacts) stays in the offline run directory, which
 * `wandb sync` uploads. The offline run is always written.
 */
import type { JsonValue } from "@stormlog/core";
import {
  type WandbArtifact,
  type WandbClient,
  WandbHtml,
  type WandbInitOptions,
  WandbLineSeries,
  type WandbPayload,
  type WandbRun,
  WandbTable,
} from "./client.js";
import type { WandbOfflineClient, WandbOfflineRun } from "./offline/writer.js";

/** The part of the W&B JS SDK's run the streamer uses. */
export interface WandbJsRun {
  log(data: Record<string, unknown>, step?: number, commit?: boolean): void;
  finish(code?: number): Promise<void>;
}

/** The part of the W&B JS SDK (`import wandb from "@wandb/sdk"`) the streamer uses. */
export interface WandbJsSdk {
  init(options: Record<string, unknown>): Promise<WandbJsRun>;
}

/** Whether online streaming can run here, and why not. */
export type OnlineAvailability = { available: true; sdk: WandbJsSdk } | { available: false; reason: string };

/** The package name of the W&B JS SDK. */
export const WANDB_JS_SDK = "@wandb/sdk";

/**
 * Loads the W&B JS SDK when it is installed and `WANDB_API_KEY` is set; else says what is missing.
 * `importSdk` replaces the dynamic import (tests).
 */
export async function loadOnlineSdk(
  env: Readonly<Record<string, string | undefined>> = process.env,
  importSdk: () => Promise<unknown> = () => import(/* @vite-ignore */ WANDB_JS_SDK as string),
): Promise<OnlineAvailability> {
  if (!env.WANDB_API_KEY) {
    return { available: false, reason: "WANDB_API_KEY is not set (run `wandb login` or export the key)" };
  }
  let module: unknown;
  try {
    module = await importSdk();
  } catch {
    return {
      available: false,
      reason: `the W&B JS SDK is not installed (\`npm install ${WANDB_JS_SDK}\` to stream online)`,
    };
  }
  const candidate = (module as { default?: unknown }).default ?? module;
  if (typeof (candidate as { init?: unknown }).init !== "function") {
    return { available: false, reason: `${WANDB_JS_SDK} has no init(): an unsupported version` };
  }
  return { available: true, sdk: candidate as WandbJsSdk };
}

function isMedia(value: unknown): boolean {
  return value instanceof WandbTable || value instanceof WandbHtml || value instanceof WandbLineSeries;
}

function scalars(payload: WandbPayload): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(payload)) {
    const value = payload[key];
    if (isMedia(value)) continue;
    out[key] = typeof value === "bigint" ? Number(value) : (value as JsonValue);
  }
  return out;
}

/** Stands in for a live run that could not start: nothing is sent. */
const NO_LIVE_RUN: WandbJsRun = { log: () => undefined, finish: async () => undefined };

class StreamingRun implements WandbRun {
  constructor(
    readonly offline: WandbOfflineRun,
    private readonly online: WandbJsRun,
    private readonly onError: (error: unknown) => void,
  ) {}

  private send(data: Record<string, unknown>): void {
    if (Object.keys(data).length === 0) return;
    try {
      this.online.log(data);
    } catch (error) {
      this.onError(error);
    }
  }

  async updateSummary(payload: WandbPayload): Promise<void> {
    await this.offline.updateSummary(payload);
    // The JS SDK has no summary API: a run's summary is each key's last logged value.
    this.send(scalars(payload));
  }

  async log(payload: WandbPayload): Promise<void> {
    await this.offline.log(payload);
    this.send(scalars(payload));
  }

  async logArtifact(artifact: WandbArtifact): Promise<void> {
    await this.offline.logArtifact(artifact);
  }

  async finish(): Promise<void> {
    await this.offline.finish();
    try {
      await this.online.finish(0);
    } catch (error) {
      this.onError(error);
    }
  }
}

/**
 * Writes the offline run and streams history, summary and config to a live run through the JS SDK.
 * A failure of the live run is reported through `onError` and never stops the offline run.
 */
export class WandbStreamingClient implements WandbClient {
  private current: StreamingRun | null = null;

  constructor(
    readonly offline: WandbOfflineClient,
    private readonly sdk: WandbJsSdk,
    private readonly onError: (error: unknown) => void = () => {},
  ) {}

  activeRun(): WandbRun | null {
    return this.current;
  }

  async init(options: WandbInitOptions): Promise<WandbRun> {
    const offline = await this.offline.init(options);
    let online: WandbJsRun;
    try {
      online = await this.sdk.init({
        project: options.project,
        ...(options.entity === undefined ? {} : { entity: options.entity }),
        // The same id as the offline run, so that a later `wandb sync` of it adds to this run.
        id: offline.runId,
        ...(options.name === undefined ? {} : { name: options.name }),
        ...(options.job_type === undefined ? {} : { job_type: options.job_type }),
        resume: "allow",
        config: { stormlog_group: options.group ?? null, stormlog_offline_run: offline.runDir },
      });
    } catch (error) {
      // No live run (network, key): said once, and the offline run goes on alone.
      this.onError(error);
      online = NO_LIVE_RUN;
    }
    const run = new StreamingRun(offline, online, this.onError);
    this.current = run;
    const finish = run.finish.bind(run);
    run.finish = async () => {
      await finish();
      if (this.current === run) this.current = null;
    };
    return run;
  }
}
