import type { SessionStatus, SessionSummary } from "@stormlog/core";
import { createSessionSummary, finalizeSessionSummary, updateSessionSummary } from "@stormlog/core/internal";
import type { ResolvedTrackerOptions } from "../options/tracker-options.js";
import type { SessionStart } from "../pipeline/record-pipeline.js";
import type { RecordContext } from "../records/store.js";

/**
 * The summary of the tracker's current (or last) session: made at `start()` from the tracker's
 * identity, marked incomplete when its sink fails, closed at `stop()` with its final status.
 */
export class TrackerSession {
  /** The session being recorded, or the last one; null before the first start. */
  summary: SessionSummary | null = null;
  /** Epoch seconds when tracking started (the statistics' `trackingStartTime`); null before. */
  trackingStartTime: number | null = null;

  constructor(private readonly options: ResolvedTrackerOptions) {}

  /** A new running session's summary (not current until `begin()`). */
  create(): SessionSummary {
    const { options } = this;
    const { identity } = options;
    return createSessionSummary({
      source: options.sessionSource,
      status: "running",
      startedAtNs: options.clock.nowNs(),
      host: options.host,
      pid: options.pid,
      jobId: identity.job_id,
      rank: identity.rank,
      localRank: identity.local_rank,
      worldSize: identity.world_size,
      clock: options.clock,
    });
  }

  /** What a sink registers of `summary`: all but its status and end. */
  static start(summary: SessionSummary): SessionStart {
    const { status: _status, ended_at_ns: _endedAtNs, ...start } = summary;
    return start;
  }

  /** Makes `summary` current, tracking from now; returns what every record of the session shares. */
  begin(summary: SessionSummary): RecordContext {
    const { options } = this;
    this.summary = summary;
    this.trackingStartTime = Number(options.clock.nowNs()) / 1e9;
    const { identity } = options;
    return {
      schemaVersion: options.schemaVersion,
      sessionId: summary.session_id,
      samplingIntervalMs: Math.round(options.samplingIntervalMs),
      pid: options.pid,
      host: options.host,
      jobId: identity.job_id,
      rank: identity.rank,
      localRank: identity.local_rank,
      worldSize: identity.world_size,
    };
  }

  /** The sink failed: the session will not be complete. */
  incomplete(): void {
    if (this.summary !== null) this.summary = updateSessionSummary(this.summary, { status: "incomplete" });
  }

  /** Ends the session: `incomplete` when it `lost` records, else `status` unless already decided. */
  close(status: SessionStatus, lost: boolean): void {
    if (this.summary === null) return;
    let summary = this.summary;
    if (lost) summary = updateSessionSummary(summary, { status: "incomplete" });
    else if (summary.status === "running" && status !== "completed")
      summary = updateSessionSummary(summary, { status });
    this.summary = finalizeSessionSummary(summary, { clock: this.options.clock });
  }
}
