import type { SessionStatus, SessionSummary } from "@stormlog/core";
import type { FsyncPolicy } from "../config.js";
import { type SinkSessionLoss, serializeManifest } from "../manifest.js";
import type { SegmentSet } from "./segments.js";

/** Why the manifest must be rewritten: segments or sessions changed (at once), or only counts (on the tick). */
export const STRUCTURAL = 2;
export const COUNTS = 1;
/** Space kept in `manifest.reserve` while a session runs: what closing it needs on a disk that fills up. */
export const RESERVE_BYTES = 64 << 10;
export const MANIFEST_RESERVE_FILENAME = "manifest.reserve";

/**
 * The sessions ledger the manifest holds (sessions, the open one, what each lost) and what is owed
 * to the disk: whether the manifest must be rewritten, and how urgently.
 */
export class ManifestLedger {
  readonly sessions = new Map<string, SessionSummary>();
  /** What each session lost, written in the manifest (`session_losses`). */
  readonly losses = new Map<string, SinkSessionLoss>();
  activeSessionId: string | null = null;
  /** 0, COUNTS or STRUCTURAL. */
  dirty = 0;
  /** A manifest write running in the background (see the writer's writeManifestBehind), and whether another is due. */
  job: Promise<void> | null = null;
  owed = false;
  /** `manifest.reserve` is on disk (made once per session). */
  reserveHeld = false;
  reserveTried = false;
  /** Records this instance lost per open session: a loss turns `completed` into `incomplete`. */
  private readonly openLoss = new Map<string, number>();

  constructor(
    private readonly segments: SegmentSet,
    private readonly fsync: FsyncPolicy,
  ) {}

  current(): SessionSummary | null {
    return this.activeSessionId === null ? null : (this.sessions.get(this.activeSessionId) ?? null);
  }

  /** Registers a `running` session as the open one; its entry goes to disk before its records. */
  open(summary: SessionSummary): void {
    this.sessions.set(summary.session_id, summary);
    this.openLoss.set(summary.session_id, 0);
    this.activeSessionId = summary.session_id;
    this.dirty = STRUCTURAL;
  }

  /** Records lost by a session; the counts reach the disk with the next manifest. */
  noteLoss(sessionId: string | null, count: number, cause: "io" | "queue"): void {
    if (sessionId === null || count === 0) return;
    this.openLoss.set(sessionId, (this.openLoss.get(sessionId) ?? 0) + count);
    let loss = this.losses.get(sessionId);
    if (loss === undefined) {
      loss = { session_id: sessionId, dropped_events: 0, dropped_io_error: 0, dropped_queue_full: 0 };
      this.losses.set(sessionId, loss);
    }
    loss.dropped_events += count;
    if (cause === "io") loss.dropped_io_error += count;
    else loss.dropped_queue_full += count;
    this.dirty ||= COUNTS;
  }

  /** What the manifest says earlier sessions lost (the open session keeps this instance's count). */
  adoptLosses(recorded: readonly SinkSessionLoss[]): void {
    const active = this.activeSessionId === null ? undefined : this.losses.get(this.activeSessionId);
    this.losses.clear();
    for (const loss of recorded) this.losses.set(loss.session_id, { ...loss });
    if (active !== undefined) this.losses.set(active.session_id, active);
  }

  /** Records the end of a session; lost records turn `completed` into `incomplete`. */
  end(sessionId: string, status: SessionStatus, endedAtNs: bigint): void {
    const summary = this.sessions.get(sessionId);
    const lost = (this.openLoss.get(sessionId) ?? 0) > 0;
    const final: SessionStatus = lost && status === "completed" ? "incomplete" : status;
    if (summary !== undefined)
      this.sessions.set(sessionId, { ...summary, status: final, ended_at_ns: endedAtNs });
    this.openLoss.delete(sessionId);
    this.dirty = STRUCTURAL;
  }

  /** The manifest's text: sessions, segments, and what sessions lost. */
  text(): string {
    return serializeManifest(this.sessions.values(), this.segments.list, this.losses.values());
  }

  /**
   * The manifest to write now, and whether to sync it (segment changes are synced under "segment");
   * what was owed is then no longer owed.
   */
  take(): { text: string; fsync: boolean } {
    const structural = this.dirty === STRUCTURAL || this.owed;
    this.dirty = 0;
    this.owed = false;
    return { text: this.text(), fsync: this.fsync === "always" || (structural && this.fsync === "segment") };
  }
}
