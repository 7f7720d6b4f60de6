import { closeSync, mkdirSync, openSync, readdirSync, readSync, statSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { type Clock, parseJson, type SessionSummary } from "@stormlog/core";
import { LineEndFinder } from "@stormlog/core/internal";
import {
  isSegmentFilename,
  readManifestSync,
  SINK_SCHEMA_VERSION,
  type SinkSegment,
  type SinkSessionLoss,
  segmentIndex,
  serializeManifest,
  writeManifestTextSync,
} from "./manifest.js";
import { countRecordsSync, repairSegmentTailSync } from "./segment-files.js";

/** What opening an existing sink directory found and changed. */
export interface RecoveryReport {
  /** A readable manifest was there. */
  readonly manifestFound: boolean;
  /** The manifest was missing or unreadable while segments existed, and was rebuilt from them. */
  readonly manifestRebuilt: boolean;
  /** Sessions left `running` by a writer that died, now `interrupted`. */
  readonly interruptedSessionIds: readonly string[];
  /** Segments on disk the manifest did not list, now listed (closed). */
  readonly adoptedSegments: readonly string[];
  /** Segments the manifest listed that no longer exist, removed from it. */
  readonly missingSegments: readonly string[];
  /** Listed segments whose size on disk differed from the manifest's, recounted. */
  readonly recountedSegments: readonly string[];
  /** Final lines cut by a crash: removed (`truncated`) or completed with a newline (`terminated`). */
  readonly repairedTails: readonly {
    filename: string;
    action: "terminated" | "truncated";
    droppedBytes: number;
  }[];
  /** Manifest entries skipped (malformed, or naming a file outside the directory). */
  readonly warnings: readonly string[];
  /** The manifest was rewritten. */
  readonly manifestWritten: boolean;
}

/** The state a writer starts from. */
export interface RecoveredState {
  readonly segments: SinkSegment[];
  readonly sessions: Map<string, SessionSummary>;
  readonly nextSegmentIndex: number;
  /** What earlier sessions lost, as the manifest recorded it (kept in every rewrite). */
  readonly losses: SinkSessionLoss[];
  readonly report: RecoveryReport;
}

/** The session id of a segment's first record, or null (used for segments the manifest does not list). */
function firstRecordSessionId(path: string): string | null {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return null;
  }
  try {
    const buffer = Buffer.allocUnsafe(1 << 16);
    const read = readSync(fd, buffer, 0, buffer.length, 0);
    const ends = new LineEndFinder();
    ends.begin(buffer.subarray(0, read));
    let end = ends.find(0);
    // A `\r` last in a file that ends there ends its line (`\r\n` would need one more byte).
    if (end < 0 && read > 0 && read < buffer.length && buffer[read - 1] === 0x0d) end = read - 1;
    if (end < 0) return null;
    const value = parseJson(buffer.subarray(0, end).toString("utf8"));
    if (typeof value === "object" && value !== null && !Array.isArray(value)) {
      const sessionId = value.session_id;
      return typeof sessionId === "string" && sessionId.trim() !== "" ? sessionId : null;
    }
    return null;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

function listSegmentFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isFile() && isSegmentFilename(entry.name))
    .map((entry) => entry.name)
    .sort();
}

/**
 * The writer's full-disk probe (see the writer's `probeForRecords`): not a `segment-*.jsonl` name,
 * so readers never take it for a segment.
 */
export const PROBE_FILENAME = "segment.probe";

/**
 * Opens a sink directory as the reference's `_load_existing_state` does, and repairs what a crash
 * left: `running` sessions become `interrupted` (ended now), unlisted segments are adopted, a
 * malformed or missing manifest is rebuilt from the segments, and the manifest is rewritten when
 * anything changed. Beyond the reference: a cut final line is removed (or completed when it is a
 * whole record), listed segments that vanished are dropped, sizes that disagree with the disk are
 * recounted, and every segment is closed (no writer owns it any more). Blocking: runs once when a
 * writer opens the directory.
 */
export function recoverSinkDirectory(
  dir: string,
  options: { clock: Clock; fsync: boolean; onWarning?: (message: string) => void },
): RecoveredState {
  mkdirSync(dir, { recursive: true });
  // A writer killed while it probed a full disk left its probe (64 KB of zeros): the caller holds
  // the directory now, so no other writer's probe is there. Housekeeping: a failure is no reason
  // not to write.
  try {
    unlinkSync(join(dir, PROBE_FILENAME));
  } catch {}
  const warnings: string[] = [];
  const warn = (message: string): void => {
    warnings.push(message);
    options.onWarning?.(message);
  };
  const discovered = listSegmentFiles(dir);
  const repairedTails: { filename: string; action: "terminated" | "truncated"; droppedBytes: number }[] = [];
  const repaired = new Set<string>();
  for (const name of discovered) {
    const repair = repairSegmentTailSync(join(dir, name));
    if (repair.action !== "none") {
      repairedTails.push({ filename: name, action: repair.action, droppedBytes: repair.droppedBytes });
      repaired.add(name);
      warn(
        repair.action === "truncated"
          ? `${name}: removed a final line cut short by a crash (${repair.droppedBytes} bytes)`
          : `${name}: completed a final record that lacked its newline`,
      );
    }
  }

  const manifest = readManifestSync(dir, { onWarning: warn });
  const sessions = new Map<string, SessionSummary>();
  const segments: SinkSegment[] = [];
  const adoptedSegments: string[] = [];
  const missingSegments: string[] = [];
  const recountedSegments: string[] = [];
  const interruptedSessionIds: string[] = [];
  let changed = false;

  const adopt = (name: string): void => {
    const path = join(dir, name);
    segments.push({
      filename: name,
      event_count: countRecordsSync(path),
      size_bytes: statSync(path).size,
      closed: true,
      session_id: firstRecordSessionId(path),
    });
  };

  if (manifest !== null) {
    const listed = new Map<string, SinkSegment>();
    for (const segment of manifest.segments) listed.set(segment.filename, { ...segment });
    const names = [...new Set([...listed.keys(), ...discovered])].sort();
    for (const name of names) {
      const entry = listed.get(name);
      if (entry === undefined) {
        adopt(name);
        adoptedSegments.push(name);
        changed = true;
        continue;
      }
      let size: number;
      try {
        size = statSync(join(dir, name)).size;
      } catch {
        missingSegments.push(name);
        changed = true;
        continue;
      }
      if (size !== entry.size_bytes || repaired.has(name)) {
        entry.event_count = countRecordsSync(join(dir, name));
        entry.size_bytes = size;
        recountedSegments.push(name);
        changed = true;
      }
      // The reference lists segments it adopted with no owner: the ledger would take their session
      // for one without records and forget it (see sessionsPastRetention). Their first record says.
      if (entry.session_id === null) entry.session_id = firstRecordSessionId(join(dir, name));
      if (!entry.closed) {
        entry.closed = true;
        changed = true;
      }
      segments.push(entry);
    }
    const nowNs = options.clock.nowNs();
    for (const summary of manifest.sessions) {
      if (summary.status === "running") {
        sessions.set(summary.session_id, { ...summary, status: "interrupted", ended_at_ns: nowNs });
        interruptedSessionIds.push(summary.session_id);
        changed = true;
      } else {
        sessions.set(summary.session_id, summary);
      }
    }
    if (manifest.schema_version !== SINK_SCHEMA_VERSION) changed = true;
  } else if (discovered.length > 0) {
    for (const name of discovered) adopt(name);
    adoptedSegments.push(...discovered);
    changed = true;
  }

  let maxIndex = 0;
  for (const name of [...segments.map((segment) => segment.filename), ...discovered]) {
    const index = segmentIndex(name);
    if (index !== undefined && index > maxIndex) maxIndex = index;
  }

  const losses = manifest?.session_losses ?? [];
  if (changed)
    writeManifestTextSync(dir, serializeManifest(sessions.values(), segments, losses), options.fsync);
  return {
    segments,
    sessions,
    nextSegmentIndex: maxIndex + 1,
    losses,
    report: {
      manifestFound: manifest !== null,
      manifestRebuilt: manifest === null && discovered.length > 0,
      interruptedSessionIds,
      adoptedSegments,
      missingSegments,
      recountedSegments,
      repairedTails,
      warnings,
      manifestWritten: changed,
    },
  };
}
