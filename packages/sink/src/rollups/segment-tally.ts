import type { JsonObject, JsonValue } from "@stormlog/core";
import { isCutShortLine, readJsonlLines } from "@stormlog/core/internal";
import {
  decodeTelemetryEventLine,
  type LineDecodeOptions,
  type TelemetryInputSegment,
} from "../reader/input.js";
import { SessionTally } from "./tally.js";

/** A final line cut short that the loaders drop, with the session the reader charges it to. */
export interface CutLine {
  readonly lineNumber: number;
  readonly length: number;
  readonly sessionId: string | null;
}

/** The reader's message for a cut final line (the one `summarizeTelemetrySessions` gives). */
export function cutLineMessage(segmentPath: string, cut: CutLine): string {
  return `${segmentPath}:${cut.lineNumber}: dropped a final line cut short (${cut.length} characters, no newline)`;
}

/** One segment's tallies, in the plain form they are cached in. */
export interface SegmentTally {
  /** Per session, `SessionTally.toData()`. */
  readonly sessions: readonly JsonObject[];
  readonly cutLine: CutLine | null;
}

export function segmentTallyToData(tally: SegmentTally): JsonObject {
  const cut = tally.cutLine;
  return {
    sessions: [...tally.sessions],
    cut_line: cut === null ? null : [cut.lineNumber, cut.length, cut.sessionId],
  };
}

export function segmentTallyFromData(data: JsonObject): SegmentTally {
  const cut = data.cut_line as JsonValue[] | null;
  return {
    sessions: data.sessions as JsonObject[],
    cutLine:
      cut === null
        ? null
        : { lineNumber: cut[0] as number, length: cut[1] as number, sessionId: cut[2] as string | null },
  };
}

/**
 * Tallies one segment's events per session, reading it as the loaders do (`decodeTelemetryEventLine`,
 * a cut final line dropped, any other bad line thrown). Windows count from `startOf(session)`, or,
 * for a session without a known start, from its first event here (the caller checks and redoes it).
 */
export async function tallySegment(
  segment: TelemetryInputSegment,
  startOf: (sessionId: string) => bigint | null,
  windowNs: bigint,
  options: LineDecodeOptions,
): Promise<SegmentTally> {
  const tallies = new Map<string, SessionTally>();
  const of = (sessionId: string, firstTs: bigint): SessionTally => {
    let tally = tallies.get(sessionId);
    if (tally === undefined) {
      tally = new SessionTally(sessionId, { startNs: startOf(sessionId) ?? firstTs, windowNs });
      tallies.set(sessionId, tally);
    }
    return tally;
  };
  let idx = 0;
  let lastSession = segment.hint;
  let cutLine: CutLine | null = null;
  for await (const line of readJsonlLines(segment.path)) {
    const location = { file: segment.path, line: line.lineNumber };
    let event: ReturnType<typeof decodeTelemetryEventLine>;
    try {
      event = decodeTelemetryEventLine(line.text, location, segment.defaultSessionId, options);
    } catch (error) {
      if (isCutShortLine(line, error)) {
        cutLine = { lineNumber: line.lineNumber, length: line.text.length, sessionId: lastSession };
        if (lastSession !== null) of(lastSession, 0n);
        break;
      }
      throw error;
    }
    lastSession = event.session_id;
    of(event.session_id, event.timestamp_ns).observe(event, { ord: 0, idx: idx++ });
  }
  if (idx === 0 && segment.hint !== null) of(segment.hint, 0n).sourced = true;
  return { sessions: [...tallies.values()].map((tally) => tally.toData()), cutLine };
}
