/**
 * Feeds one rank's samples to the gap analysis (`gap.ts`) as columns: only the few samples a finding
 * points at are rebuilt as light records (for their phase attribution).
 */
import type { TelemetryEvent } from "@stormlog/core";
import type { PhaseResolver } from "@stormlog/phases";
import { exactAt, originAt, type RankSeries, sampleTimeAsNumber, seriesForRule } from "../input/dataset.js";
import type { RankGapFinding } from "../report/types.js";
import type { RankAnalysis, RankData } from "./analysis.js";
import { analyzeGapColumns, type GapColumns } from "./gap.js";

const orNull = (value: number): number | null => (Number.isNaN(value) ? null : value);

/** Sample `i` of a series as the light record the analyses read (its metadata: its phase attribution hints). */
export function sampleRecord(series: RankSeries, i: number): TelemetryEvent {
  const identity = series.identities[series.identity === null ? 0 : series.identity[i]!]!;
  return {
    schema_version: 3,
    session_id: series.sessionId,
    timestamp_ns: series.base + BigInt(series.t[i]!),
    event_type: "sample",
    collector: "",
    sampling_interval_ms: identity.sampling_interval_ms,
    pid: identity.pid,
    host: identity.host,
    job_id: identity.job_id,
    rank: series.rank,
    local_rank: 0,
    world_size: identity.world_size,
    device_id: identity.device_id,
    allocator_allocated_bytes: orNull(series.allocated[i]!),
    allocator_reserved_bytes: orNull(series.reserved[i]!),
    allocator_active_bytes: null,
    allocator_inactive_bytes: null,
    allocator_change_bytes: 0,
    device_used_bytes: orNull(series.used[i]!),
    device_free_bytes: null,
    device_total_bytes: orNull(series.total[i]!),
    context: null,
    metadata: originAt(series, i) ?? {},
  } as unknown as TelemetryEvent;
}

/** The series' samples as `analyzeGapColumns` reads them. */
export function gapColumns(series: RankSeries): GapColumns {
  return {
    count: series.count,
    used: series.used,
    reserved: series.reserved,
    allocated: series.allocated,
    total: series.total,
    timeOf: sampleTimeAsNumber(series),
    event: (i) => sampleRecord(series, i),
    ...(series.exact === null ? {} : { exactCounters: (i: number) => exactAt(series, i) }),
  };
}

const SEVERITY_ORDER: Readonly<Record<string, number>> = { critical: 0, warning: 1, info: 2 };

/** Hidden-memory gap findings, one session's rank at a time; `finish` orders them by severity, then confidence. */
export class GapAccumulator implements RankAnalysis<RankGapFinding[]> {
  private readonly findings: RankGapFinding[] = [];

  addRank(data: RankData): void {
    for (const series of data.series) this.add(series, data.phaseIndex(series));
  }

  private add(series: RankSeries, resolver: PhaseResolver | null): void {
    // The reference's gap rule for samples: `str(event_type).strip().lower() == "sample"`.
    const samples = seriesForRule(series, "strip-lower");
    for (const finding of analyzeGapColumns(gapColumns(samples), { phaseResolver: resolver })) {
      this.findings.push(Object.assign(finding, { rank: series.rank, session_id: series.sessionId }));
    }
  }

  finish(): RankGapFinding[] {
    // Stable, like Python's sort.
    return this.findings.sort(
      (a, b) =>
        (SEVERITY_ORDER[a.severity] ?? 3) - (SEVERITY_ORDER[b.severity] ?? 3) || b.confidence - a.confidence,
    );
  }
}
