import {
  compareSessionsForSelection,
  type JsonObject,
  type JsonValue,
  normalizeTelemetryRecord,
  type SessionSummary,
  type TelemetryEvent,
} from "@stormlog/core";
import {
  ByteOrderMarkError,
  inferSessionSummaryFromEvents,
  isCutShortLine,
  LosslessJsonParser,
  linesAt,
  readJsonlLines,
  stableLegacySessionId,
} from "@stormlog/core/internal";
import { SEGMENT_SUFFIX } from "../directory/manifest.js";
import {
  fileSystemErrorCode,
  SessionNotFoundError,
  TelemetryInputAccessError,
  TelemetrySourceError,
} from "../errors.js";
import {
  decodeTelemetryEventLine,
  type ResolvedTelemetryInput,
  removedWhileRead,
  resolveTelemetryInput,
  segmentShortfall,
  type TelemetryInputKind,
} from "./input.js";
import { readRegularFile } from "./regular-file.js";

/** Options of the loaders (the reference's `load_telemetry_sessions` arguments, and ours). */
export interface ReadOptions {
  /** Convert records without `schema_version` from older Stormlog versions (default true). */
  permissiveLegacy?: boolean;
  /** Key of the events list in a JSON object (default `events`, as the reference). */
  eventsKey?: string;
  /** Reject integer fields written as floats (`1.0`), as the reference does (default true). */
  strict?: boolean;
  /** Schema records are upgraded to: 3 (default, the Python snapshot) or 4. */
  upgradeTo?: 3 | 4;
  /**
   * Told about what was skipped or distrusted: a final line cut by a crash, a segment shorter than
   * its manifest says, a manifest that is no sink manifest, refused manifest entries; and that the
   * input is an OOM dump folder.
   */
  onWarning?: (message: string) => void;
}

/** One session as the loaders see it, without its events. */
export interface SessionInfo {
  /** From the sink's ledger when it has the session, else inferred from the events (as the reference). */
  summary: SessionSummary;
  eventCount: number;
  /** Earliest and latest `timestamp_ns` of its events (null without events). */
  firstTimestampNs: bigint | null;
  lastTimestampNs: bigint | null;
  /** Files the session's events came from. */
  sources: string[];
  /** What was skipped while reading them. */
  warnings: string[];
}

/** A session with its events, sorted by `timestamp_ns` (stable), as the reference's loader returns it. */
export interface LoadedSession extends SessionInfo {
  events: TelemetryEvent[];
}

/** An event with where it came from. */
interface ScannedEvent {
  readonly event: TelemetryEvent;
  readonly source: string;
}

interface ScanHooks {
  /** A segment that held no events, with its manifest session (the reference lists it as a source). */
  onEmptySegment?(source: string, sessionId: string): void;
  onWarning?(message: string, sessionId: string | null): void;
}

/**
 * The lossless parser, remembering where each element of the document's first two levels of
 * arrays began: the records of a JSON array or of its `events`, so that an error about one names
 * its line.
 */
class PositionedJsonParser extends LosslessJsonParser {
  /** Where the top-level value starts. */
  start = 0;
  /** The start of each element, by array (arrays of the first two levels only). */
  readonly elementStarts = new WeakMap<JsonValue[], number[]>();
  /** The containers open at the first two levels: an array's element starts, or null for an object. */
  private readonly open: (number[] | null)[] = [];

  override readValue(): JsonValue {
    if (this.depth <= 2) {
      this.skipWhitespace();
      if (this.depth === 0) this.start = this.pos;
      else this.open[this.open.length - 1]?.push(this.pos);
    }
    return super.readValue();
  }

  override readArray(): JsonValue[] {
    if (this.depth >= 2) return super.readArray();
    const starts: number[] = [];
    this.open.push(starts);
    const array = super.readArray();
    this.open.pop();
    this.elementStarts.set(array, starts);
    return array;
  }

  override readObject(): JsonObject {
    if (this.depth >= 2) return super.readObject();
    this.open.push(null);
    const object = super.readObject();
    this.open.pop();
    return object;
  }
}

/** A JSON document's records, each with the 1-based line it starts on. */
interface JsonDocumentRecords {
  readonly records: readonly JsonObject[];
  readonly lines: readonly number[];
}

/** The records of the JSON document `text` (at `path`), each with its line. */
function jsonDocumentRecords(text: string, path: string, eventsKey: string | undefined): JsonDocumentRecords {
  // Saved as "UTF-8 with BOM": said as such, not as an unexpected character.
  if (text.charCodeAt(0) === 0xfeff) throw new ByteOrderMarkError({ file: path, line: 1 });
  const parser = new PositionedJsonParser(text, { file: path });
  const payload = parser.readValue();
  const end = parser.pos;
  parser.skipWhitespace();
  // An object, then another on a later line: JSONL under another name, which is read as one document.
  if (
    typeof payload === "object" &&
    payload !== null &&
    !Array.isArray(payload) &&
    text.charCodeAt(parser.pos) === 0x7b &&
    text.slice(end, parser.pos).includes("\n")
  ) {
    throw new TelemetrySourceError(
      path,
      `Holds one JSON object per line (JSONL), but only *${SEGMENT_SUFFIX} files are read line by line ` +
        `(others as one JSON document, as the Python reference does): rename it to end in ${SEGMENT_SUFFIX}`,
    );
  }
  parser.expectEnd();
  let records: JsonValue[];
  if (Array.isArray(payload)) {
    records = payload;
  } else if (typeof payload === "object" && payload !== null) {
    if (eventsKey !== undefined) {
      const listed = payload[eventsKey] ?? null;
      if (!Array.isArray(listed)) {
        throw new TelemetrySourceError(path, `Top-level key '${eventsKey}' must contain a list of events`);
      }
      records = listed;
    } else if (Array.isArray(payload.events)) {
      records = payload.events;
    } else if (
      [
        "schema_version",
        "event_type",
        "type",
        "memory_allocated",
        "memory_mb",
        "timestamp",
        "timestamp_ns",
      ].some((key) => key in payload)
    ) {
      records = [payload];
    } else {
      throw new TelemetrySourceError(path, "JSON payload does not contain telemetry events");
    }
  } else {
    throw new TelemetrySourceError(path, "Telemetry payload must be a JSON object or array");
  }
  const lines = linesAt(text, parser.elementStarts.get(records) ?? [parser.start]);
  records.forEach((record, index) => {
    if (typeof record !== "object" || record === null || Array.isArray(record)) {
      throw new TelemetrySourceError(
        path,
        `Event at index ${index} (line ${lines[index]}) must be an object`,
      );
    }
  });
  return { records: records as JsonObject[], lines };
}

/** Every event of the input in storage order: segments by name, lines in order. Nothing is retained. */
async function* scan(
  input: ResolvedTelemetryInput,
  options: ReadOptions,
  hooks: ScanHooks = {},
): AsyncGenerator<ScannedEvent> {
  if (input.kind === "json") {
    let text: string;
    try {
      text = await readRegularFile(input.path);
    } catch (error) {
      if (TelemetrySourceError.isInstance(error)) throw error;
      throw TelemetryInputAccessError.wrap(input.path, error);
    }
    const document = jsonDocumentRecords(text, input.path, options.eventsKey);
    const defaultSessionId = stableLegacySessionId([input.absolute, options.eventsKey ?? "json"]);
    const { records, lines } = document;
    for (let i = 0; i < records.length; i++) {
      const event = normalizeTelemetryRecord(records[i]!, {
        defaultSessionId,
        permissiveLegacy: options.permissiveLegacy !== false,
        strict: options.strict !== false,
        location: { file: input.path, line: lines[i] },
        upgradeTo: options.upgradeTo ?? 3,
      });
      yield { event, source: input.path };
    }
    return;
  }
  for (const part of input.parts) {
    for (const inputSegment of part.segments) {
      const { path: segment, hint, defaultSessionId } = inputSegment;
      let count = 0;
      let lastSession: string | null = hint;
      // A file-system error (a permission, a link loop) is typed; decode errors pass through as they are.
      try {
        for await (const line of readJsonlLines(segment)) {
          const location = { file: segment, line: line.lineNumber };
          let event: TelemetryEvent;
          try {
            event = decodeTelemetryEventLine(line.text, location, defaultSessionId, options);
          } catch (error) {
            if (isCutShortLine(line, error)) {
              const message = `${segment}:${line.lineNumber}: dropped a final line cut short (${line.text.length} characters, no newline)`;
              options.onWarning?.(message);
              hooks.onWarning?.(message, lastSession);
              break;
            }
            throw error;
          }
          count++;
          lastSession = event.session_id;
          yield { event, source: segment };
        }
      } catch (error) {
        // Listed a moment ago and removed before it was opened: a live writer's retention pruned it.
        // Read as if it had been listed after the pruning.
        if (count === 0 && fileSystemErrorCode(error) === "ENOENT") {
          options.onWarning?.(removedWhileRead(segment));
          continue;
        }
        throw TelemetryInputAccessError.wrap(segment, error);
      }
      if (count === 0 && hint !== null) hooks.onEmptySegment?.(segment, hint);
      // Not among the session's `warnings`: those are the reference loader's (rollups.json keeps them).
      const shortfall = segmentShortfall(inputSegment, count);
      if (shortfall !== null) options.onWarning?.(shortfall);
    }
  }
}

/** Per-session figures gathered in one pass, holding only the first event and the last stop. */
class SessionTally {
  count = 0;
  first: TelemetryEvent | null = null;
  last: bigint | null = null;
  lastStop: TelemetryEvent | null = null;
  readonly sources = new Set<string>();
  readonly warnings: string[] = [];
  events: TelemetryEvent[] | null = null;

  add(event: TelemetryEvent, source: string): void {
    this.count++;
    this.sources.add(source);
    const ts = event.timestamp_ns;
    if (this.first === null || ts < this.first.timestamp_ns) this.first = event;
    if (this.last === null || ts > this.last) this.last = ts;
    if (event.event_type === "stop" && (this.lastStop === null || ts >= this.lastStop.timestamp_ns))
      this.lastStop = event;
    this.events?.push(event);
  }
}

interface Tallied {
  readonly input: ResolvedTelemetryInput;
  readonly tallies: Map<string, SessionTally>;
  readonly ledger: Map<string, SessionSummary>;
}

async function tally(path: string, options: ReadOptions, keepEvents: boolean): Promise<Tallied> {
  const warn = (message: string): void => options.onWarning?.(message);
  const input = await resolveTelemetryInput(path, warn);
  const tallies = new Map<string, SessionTally>();
  const of = (sessionId: string): SessionTally => {
    let found = tallies.get(sessionId);
    if (found === undefined) {
      found = new SessionTally();
      if (keepEvents) found.events = [];
      tallies.set(sessionId, found);
    }
    return found;
  };
  const hooks: ScanHooks = {
    onEmptySegment: (source, sessionId) => of(sessionId).sources.add(source),
    onWarning: (message, sessionId) => {
      if (sessionId !== null) of(sessionId).warnings.push(message);
    },
  };
  for await (const { event, source } of scan(input, options, hooks)) of(event.session_id).add(event, source);
  const ledger = new Map<string, SessionSummary>();
  for (const part of input.parts) {
    for (const summary of part.manifest?.sessions ?? []) {
      if (!ledger.has(summary.session_id)) ledger.set(summary.session_id, summary);
    }
  }
  return { input, tallies, ledger };
}

function assemble(tallied: Tallied): LoadedSession[] {
  const { input, tallies, ledger } = tallied;
  const ids = new Set([...tallies.keys(), ...ledger.keys()]);
  const sessions: LoadedSession[] = [];
  for (const sessionId of ids) {
    const figures = tallies.get(sessionId);
    let summary = ledger.get(sessionId);
    if (summary === undefined) {
      const evidence = figures?.first ? [figures.first, ...(figures.lastStop ? [figures.lastStop] : [])] : [];
      summary = inferSessionSummaryFromEvents({ sessionId, events: evidence, source: input.defaultSource });
    }
    const events = figures?.events ?? [];
    if (figures?.events) {
      events.sort((a, b) => (a.timestamp_ns < b.timestamp_ns ? -1 : a.timestamp_ns > b.timestamp_ns ? 1 : 0));
    }
    sessions.push({
      summary,
      eventCount: figures?.count ?? 0,
      firstTimestampNs: figures?.first?.timestamp_ns ?? null,
      lastTimestampNs: figures?.last ?? null,
      sources: figures && figures.sources.size > 0 ? [...figures.sources].sort() : [input.defaultSourcePath],
      warnings: figures?.warnings ?? [],
      events,
    });
  }
  return sessions.sort((a, b) => compareSessionsForSelection(a.summary, b.summary));
}

/**
 * The sessions of a sink directory (or a root of sink directories, a `manifest.json`, a JSONL
 * segment, a JSON array or a JSON object with `events`), in the reference's order: completed first,
 * then interrupted, incomplete, running, each newest first. One streaming pass; no event is kept,
 * so memory does not grow with the size of the input.
 */
export async function summarizeTelemetrySessions(
  path: string,
  options: ReadOptions = {},
): Promise<SessionInfo[]> {
  return assemble(await tally(path, options, false)).map(({ events: _events, ...info }) => info);
}

/**
 * Like `summarizeTelemetrySessions`, with every session's events (sorted by `timestamp_ns`), as the
 * reference's `load_telemetry_sessions`. Memory grows with the input: prefer the streaming APIs
 * for large sinks.
 */
export async function loadTelemetrySessions(
  path: string,
  options: ReadOptions = {},
): Promise<LoadedSession[]> {
  return assemble(await tally(path, options, true));
}

/** The reference's default: the first session in order that has events (else the first). */
function pickSession<T extends SessionInfo>(
  sessions: readonly T[],
  sessionId: string | undefined,
  path: string,
): T | undefined {
  if (sessionId !== undefined) {
    const found = sessions.find((session) => session.summary.session_id === sessionId);
    if (found === undefined) {
      throw new SessionNotFoundError(
        sessionId,
        sessions.map((session) => session.summary.session_id),
        path,
      );
    }
    return found;
  }
  return sessions.find((session) => session.eventCount > 0) ?? sessions[0];
}

/**
 * The events of one session, sorted by `timestamp_ns`: `sessionId`, or by default the first
 * session with events in the reference's order. An unknown id throws `SessionNotFoundError`
 * listing the ids there are. Empty input gives `[]`.
 */
export async function loadTelemetryEvents(
  path: string,
  options: ReadOptions & { sessionId?: string } = {},
): Promise<TelemetryEvent[]> {
  const sessions = await loadTelemetrySessions(path, options);
  return pickSession(sessions, options.sessionId, path)?.events ?? [];
}

/**
 * Every event of the input, one at a time, in storage order (segment by segment, line by line;
 * within a session written by one process that is the order of `append`). Nothing is retained.
 * With `sessionId`, only that session's events.
 */
export async function* iterateTelemetryEvents(
  path: string,
  options: ReadOptions & { sessionId?: string } = {},
): AsyncGenerator<TelemetryEvent> {
  const input = await resolveTelemetryInput(path, (message) => options.onWarning?.(message));
  for await (const { event } of scan(input, options)) {
    if (options.sessionId === undefined || event.session_id === options.sessionId) yield event;
  }
}

/** A chosen session and a way to stream its events. */
export interface OpenedSession {
  readonly session: SessionInfo;
  /** Every session of the input, in order. */
  readonly sessions: readonly SessionInfo[];
  /** Streams the session's events in storage order (reads the input again; nothing retained). */
  events(): AsyncGenerator<TelemetryEvent>;
}

/**
 * Chooses a session as `loadTelemetryEvents` does (or throws `SessionNotFoundError`) without
 * loading it; `events()` then streams it. Two passes over the input, constant memory.
 */
export async function openTelemetrySession(
  path: string,
  options: ReadOptions & { sessionId?: string } = {},
): Promise<OpenedSession | undefined> {
  const sessions = await summarizeTelemetrySessions(path, options);
  const session = pickSession(sessions, options.sessionId, path);
  if (session === undefined) return undefined;
  const sessionId = session.summary.session_id;
  return {
    session,
    sessions,
    events: () => iterateTelemetryEvents(path, { ...options, sessionId, onWarning: () => undefined }),
  };
}

/** What kind of input `path` is, as the loaders see it. */
export async function describeTelemetryInput(
  path: string,
): Promise<{ kind: TelemetryInputKind; directories: string[] }> {
  const input = await resolveTelemetryInput(path, () => undefined);
  return {
    kind: input.kind,
    directories: input.parts.map((part) => part.dir),
  };
}
