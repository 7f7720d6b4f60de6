/**
 * The memory timelines of a selection, read from the Perfetto export's trace events
 * (`streamTraceEvents` of `@stormlog/analysis`, which reads the analysis dataset one rank at a
 * time): per rank, its counter tracks rebuilt into rows (a counter holds its value until the next
 * change), reduced per pixel column (`reduce.ts`), its phase slices as nested bands and its alert,
 * OOM and collector instants as markers. Memory holds one rank's rows at a time.
 */
import { streamTraceEvents, type TraceEvent } from "@stormlog/analysis";
import { reduceRows } from "./reduce.js";

/** One series of a rank's chart. */
export interface TimelineSeries {
  /** The trace's track name (`device 0 allocated`, `allocated`, `host reserved`). */
  readonly track: string;
  /** What the chart calls it. */
  readonly label: string;
  /** `allocated`, `reserved`, `used` or `rss`: picks the colour. */
  readonly kind: "allocated" | "reserved" | "used" | "rss";
}

/** A marker on a rank's timeline. */
export interface TimelineMarker {
  /** Seconds since the time origin (the rank's own clock). */
  readonly t: number;
  readonly kind: "alert" | "oom" | "collector" | "spike" | "gap";
  readonly label: string;
  /** The phase path active then, when known. */
  readonly phase: string | null;
}

/** One rank's timeline, reduced. */
export interface RankTimeline {
  readonly rank: number;
  /** `rank R @ host`. */
  readonly name: string;
  readonly series: TimelineSeries[];
  /** Kept row times: seconds since the time origin, rounded to the microsecond. */
  readonly x: number[];
  /** Per series, the values of the kept rows (null before the series' first reading). */
  readonly y: (number | null)[][];
  /** Rows read before the reduction. */
  readonly rowCount: number;
  /** Phase bands: `[start s, end s, depth, index into the phase path list]`. */
  readonly spans: [number, number, number, number][];
  /** Spans left out past the per-rank limit (the shortest ones go first). */
  readonly spansDropped: number;
  readonly markers: TimelineMarker[];
  readonly markersDropped: number;
}

/** Every rank's timeline, and the phase paths their bands point into. */
export interface Timelines {
  /** The time origin: `first_timestamp_ns` of the trace (every `t` is seconds after it). */
  readonly originNs: bigint;
  readonly ranks: RankTimeline[];
  readonly phasePaths: string[];
  /** Seconds from the origin to the last row or span of any rank. */
  readonly endS: number;
}

/** Options of `readTimelines`. */
export interface TimelineOptions {
  readonly sessionId?: string;
  readonly index?: boolean;
  readonly cacheDir?: string;
  /** Pixel columns the series are reduced to. */
  readonly columns: number;
  /** The range the columns cover, in seconds since the origin (the run's duration). */
  readonly rangeS: number;
  readonly maxSpansPerRank: number;
  readonly maxMarkersPerRank: number;
  readonly onWarning?: (message: string) => void;
}

const KIND_OF: Readonly<Record<string, TimelineSeries["kind"]>> = {
  allocated: "allocated",
  reserved: "reserved",
  "device used": "used",
};

/** The series a track feeds (null: left out of the chart, as the hidden gap, drawn by its two lines). */
function seriesOf(track: string): TimelineSeries | null {
  if (track.endsWith("hidden gap")) return null;
  if (track.startsWith("host ")) {
    // The process collector reads RSS into allocated and reserved alike: one line.
    return track === "host reserved" ? { track, label: "process RSS (host)", kind: "rss" } : null;
  }
  const match = /^(device (-?\d+) )?(allocated|reserved|device used)$/.exec(track);
  if (match === null) return null;
  const kind = KIND_OF[match[3]!]!;
  // Unprefixed tracks are the host's (device -1): the CPU tracker reads the process's RSS.
  return { track, label: match[1] === undefined ? `${track} (host)` : track, kind };
}

const ORDER: Readonly<Record<TimelineSeries["kind"], number>> = {
  allocated: 0,
  reserved: 1,
  used: 2,
  rss: 3,
};

/** Rounds seconds to the microsecond (the trace's `ts` is in microseconds). */
const seconds = (micros: number): number => Math.round(micros) / 1e6;

class RankBuilder {
  readonly series: TimelineSeries[] = [];
  private readonly slot = new Map<string, number>();
  private readonly t: number[] = [];
  private readonly values: (number | null)[][] = [];
  private readonly state: (number | null)[] = [];
  readonly spans: [number, number, number, string][] = [];
  readonly markers: TimelineMarker[] = [];
  name: string;

  constructor(readonly rank: number) {
    this.name = `rank ${rank}`;
  }

  counter(track: string, ts: number, value: number): void {
    let s = this.slot.get(track);
    if (s === undefined) {
      const series = seriesOf(track);
      s = series === null ? -1 : this.series.length;
      this.slot.set(track, s);
      if (series !== null) {
        this.series.push(series);
        this.state.push(null);
        this.values.push(new Array<number | null>(this.t.length).fill(null));
      }
    }
    if (s < 0) return;
    const x = seconds(ts);
    const last = this.t.length - 1;
    if (last < 0 || this.t[last]! !== x) {
      this.t.push(x);
      for (let k = 0; k < this.values.length; k++) this.values[k]!.push(this.state[k]!);
    }
    this.state[s] = value;
    this.values[s]![this.t.length - 1] = value;
  }

  finish(options: TimelineOptions, pathIndex: (path: string) => number): RankTimeline {
    const order = this.series.map((_, i) => i);
    order.sort((a, b) => {
      const sa = this.series[a]!;
      const sb = this.series[b]!;
      return ORDER[sa.kind] - ORDER[sb.kind] || a - b;
    });
    const kept = reduceRows({ t: this.t, values: this.values }, 0, options.rangeS, options.columns);
    const x = kept.map((i) => this.t[i]!);
    const y = order.map((s) => kept.map((i) => this.values[s]![i] ?? null));
    let spans = this.spans;
    let spansDropped = 0;
    if (spans.length > options.maxSpansPerRank) {
      spans = [...spans].sort((a, b) => b[1] - b[0] - (a[1] - a[0]) || a[2] - b[2]);
      spansDropped = spans.length - options.maxSpansPerRank;
      spans = spans.slice(0, options.maxSpansPerRank).sort((a, b) => a[0] - b[0] || a[2] - b[2]);
    }
    let markers = this.markers.sort((a, b) => a.t - b.t);
    let markersDropped = 0;
    if (markers.length > options.maxMarkersPerRank) {
      // Spikes, OOMs and gap findings first: they are few and they are the story.
      const weight = { spike: 0, oom: 1, gap: 2, alert: 3, collector: 4 } as const;
      const ranked = [...markers].sort((a, b) => weight[a.kind] - weight[b.kind] || a.t - b.t);
      markersDropped = markers.length - options.maxMarkersPerRank;
      markers = ranked.slice(0, options.maxMarkersPerRank).sort((a, b) => a.t - b.t);
    }
    return {
      rank: this.rank,
      name: this.name,
      series: order.map((s) => this.series[s]!),
      x,
      y,
      rowCount: this.t.length,
      spans: spans.map(([start, end, depth, path]) => [start, end, depth, pathIndex(path)]),
      spansDropped,
      markers,
      markersDropped,
    };
  }

  lastTime(): number {
    let end = this.t[this.t.length - 1] ?? 0;
    for (const span of this.spans) if (span[1] > end) end = span[1];
    return end;
  }
}

function text(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

function instantMarker(event: TraceEvent): TimelineMarker | null {
  const kind =
    event.cat === "alert"
      ? event.name.startsWith("OOM: ")
        ? "oom"
        : "alert"
      : event.cat === "collector"
        ? "collector"
        : null;
  if (kind === null || event.ts === undefined) return null;
  return { t: seconds(event.ts), kind, label: event.name, phase: text(event.args?.phase) };
}

/**
 * Reads the timelines of a telemetry path's selection (the session or rank group
 * `analyzeTelemetry` picks, or `sessionId`), one rank at a time.
 */
export async function readTimelines(path: string, options: TimelineOptions): Promise<Timelines> {
  const events = streamTraceEvents(path, {
    analyses: false,
    ...(options.sessionId === undefined ? {} : { sessionId: options.sessionId }),
    ...(options.index === undefined ? {} : { index: options.index }),
    ...(options.cacheDir === undefined ? {} : { cacheDir: options.cacheDir }),
    ...(options.onWarning === undefined ? {} : { onWarning: options.onWarning }),
  });
  const phasePaths: string[] = [];
  const pathIndexes = new Map<string, number>();
  const pathIndex = (path: string): number => {
    let index = pathIndexes.get(path);
    if (index === undefined) {
      index = phasePaths.length;
      phasePaths.push(path);
      pathIndexes.set(path, index);
    }
    return index;
  };
  const ranks: RankTimeline[] = [];
  let endS = 0;
  let current: RankBuilder | null = null;
  const builders = new Map<number, RankBuilder>();
  const finish = (): void => {
    if (current === null) return;
    endS = Math.max(endS, current.lastTime());
    ranks.push(current.finish(options, pathIndex));
    builders.delete(current.rank);
    current = null;
  };
  let step = await events.next();
  try {
    while (step.done !== true) {
      const event = step.value;
      step = await events.next();
      const rank = event.pid - 1;
      if (current === null || current.rank !== rank) {
        // Ranks come one after the other; the analyses' instants (if any) after the last one.
        finish();
        current = builders.get(rank) ?? new RankBuilder(rank);
        builders.set(rank, current);
      }
      const builder: RankBuilder = current;
      switch (event.ph) {
        case "C": {
          const bytes = event.args?.bytes;
          if (typeof bytes === "number" && event.ts !== undefined)
            builder.counter(event.name, event.ts, bytes);
          break;
        }
        case "X": {
          const phasePath = text(event.args?.phase_path) ?? event.name;
          const depth = typeof event.args?.depth === "number" ? event.args.depth : 1;
          if (event.ts !== undefined)
            builder.spans.push([seconds(event.ts), seconds(event.ts + (event.dur ?? 0)), depth, phasePath]);
          break;
        }
        case "i": {
          const marker = instantMarker(event);
          if (marker !== null) builder.markers.push(marker);
          break;
        }
        case "M":
          if (event.name === "process_name") builder.name = text(event.args?.name) ?? builder.name;
          break;
      }
    }
  } catch (error) {
    // Closing the stream runs its cleanup (the index's spill folder, open files).
    await events.return(undefined as never).catch(() => undefined);
    throw error;
  }
  finish();
  ranks.sort((a, b) => a.rank - b.rank);
  const originNs = BigInt(step.value.otherData.first_timestamp_ns ?? "0");
  return { originNs, ranks, phasePaths, endS };
}
