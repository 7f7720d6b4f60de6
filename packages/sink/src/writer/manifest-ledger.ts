import { join } from "node:path";
import type { SessionStatus, SessionSummary } from "@stormlog/core";
import { type SinkSessionLoss, serializeManifest, sessionsPastRetention } from "../directory/manifest.js";
import type { FsyncPolicy } from "./config.js";
import type { IoOp, IoResult } from "./io.js";
import type { SegmentSet } from "./segments.js";

/** Why the manifest must be rewritten: segments or sessions changed (at once), or only counts (on the tick). */
const STRUCTURAL = 2;
const COUNTS = 1;
/**
 * Space kept in `manifest.reserve` while a session runs: what closing it needs on a disk that fills
 * up (on a nearly full one, what can be had).
 */
const RESERVE_BYTES = 64 << 10;
export const MANIFEST_RESERVE_FILENAME = "manifest.reserve";

/**
 * The sessions ledger the manifest holds (sessions, the open one, what each lost) and what is owed
 * to the disk: whether the manifest must be rewritten, and how urgently. Also `manifest.reserve`,
 * the space that lets the ledger be written on a full disk.
 */
export class ManifestLedger {
  readonly sessions = new Map<string, SessionSummary>();
  /** The open session (`open()`, until `detach()`). */
  private active: string | null = null;
  /** 0, COUNTS or STRUCTURAL. */
  private dirty = 0;
  /** A manifest write running in the background (see the writer's writeManifestBehind), and whether another is due. */
  job: Promise<void> | null = null;
  owed = false;
  /** What each session lost, written in the manifest (`session_losses`). */
  private readonly losses = new Map<string, SinkSessionLoss>();
  /** Records this instance lost per open session: a loss turns `completed` into `incomplete`. */
  private readonly openLoss = new Map<string, number>();
  /** `manifest.reserve` is on disk, and whether this session tried to make it (once per session). */
  private reserveHeld = false;
  private reserveTried = false;

  /**
   * `keepWithoutSegments`: how many ended sessions owning no listed segment the ledger keeps, the
   * newest (see sessionsPastRetention); the rest are forgotten, so that the manifest stays as small as
   * what retention keeps.
   */
  constructor(
    private readonly segments: SegmentSet,
    private readonly fsync: FsyncPolicy,
    private readonly keepWithoutSegments: number,
  ) {}

  current(): SessionSummary | null {
    return this.activeSessionId === null ? null : (this.sessions.get(this.activeSessionId) ?? null);
  }

  /** Segments or sessions changed: the manifest is rewritten at once. */
  changed(): void {
    this.dirty = STRUCTURAL;
  }

  /** Only counts changed: the manifest waits for the tick (or the retry). */
  countsChanged(): void {
    this.dirty ||= COUNTS;
  }

  /** The manifest is out of date. */
  get stale(): boolean {
    return this.dirty !== 0;
  }

  /** The manifest lacks a segment or session change (written at once, unlike counts). */
  get structurallyStale(): boolean {
    return this.dirty === STRUCTURAL;
  }

  /** Nothing owed to the disk and no write running: the manifest on disk is this one. */
  get settled(): boolean {
    return this.dirty === 0 && this.job === null && !this.owed;
  }

  /** A background write runs: this change is written when it ends. */
  oweBehind(): void {
    this.owed = true;
    this.dirty = 0;
  }

  /** The whole ledger goes to the writer's own path (after a failure, or while it backs off). */
  reclaim(): void {
    this.owed = false;
    this.changed();
  }

  /** What recovery read from the directory; the open session keeps this instance's entry and count. */
  adopt(sessions: ReadonlyMap<string, SessionSummary>, losses: readonly SinkSessionLoss[]): void {
    const active = this.current();
    const activeLoss = this.activeSessionId === null ? undefined : this.losses.get(this.activeSessionId);
    this.sessions.clear();
    for (const [id, summary] of sessions) this.sessions.set(id, summary);
    if (active !== null) this.sessions.set(active.session_id, active);
    this.losses.clear();
    for (const loss of losses) this.losses.set(loss.session_id, { ...loss });
    if (activeLoss !== undefined) this.losses.set(activeLoss.session_id, activeLoss);
    this.forgetPastRetention();
  }

  /** Drops the sessions retention has left without records, but the newest few (and their losses). */
  private forgetPastRetention(): void {
    const { sessions, segments, keepWithoutSegments } = this;
    const isOpen = (id: string) => this.isOpen(id);
    for (const gone of sessionsPastRetention(sessions.values(), segments.list, keepWithoutSegments, isOpen)) {
      this.sessions.delete(gone.session_id);
      this.losses.delete(gone.session_id);
    }
  }

  get activeSessionId(): string | null {
    return this.active;
  }

  /** Ends the open session's hold on new records; returns its id (null when none was open). */
  detach(): string | null {
    const id = this.active;
    this.active = null;
    return id;
  }

  /** Registers a `running` session as the open one; its entry goes to disk before its records. */
  open(summary: SessionSummary): void {
    this.sessions.set(summary.session_id, summary);
    this.openLoss.set(summary.session_id, 0);
    this.active = summary.session_id;
    this.changed();
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
    // The tick's manifest, or the retry's once the disk works.
    this.countsChanged();
  }

  /** The session is open or closing: its end is not recorded yet. */
  isOpen(sessionId: string | null): boolean {
    return sessionId !== null && this.openLoss.has(sessionId);
  }

  /**
   * The directory was removed or moved away and is made again: what its manifest held went with it.
   * The sessions not ended yet stay, with what they lost; the reserve is made again in the new one.
   */
  forgetDirectory(): void {
    for (const id of [...this.sessions.keys()]) {
      if (this.openLoss.has(id)) continue;
      this.sessions.delete(id);
      this.losses.delete(id);
    }
    this.reserveHeld = false;
    this.reserveTried = false;
    this.changed();
  }

  /** Records the end of a session; lost records turn `completed` into `incomplete`. */
  end(sessionId: string, status: SessionStatus, endedAtNs: bigint): void {
    const summary = this.sessions.get(sessionId);
    const lost = (this.openLoss.get(sessionId) ?? 0) > 0;
    const final: SessionStatus = lost && status === "completed" ? "incomplete" : status;
    if (summary !== undefined)
      this.sessions.set(sessionId, { ...summary, status: final, ended_at_ns: endedAtNs });
    this.openLoss.delete(sessionId);
    this.changed();
  }

  /** The manifest's text: sessions, segments, and what sessions lost. */
  text(): string {
    // Every write follows pruning and ended sessions: the ledger stays bounded by what is retained.
    this.forgetPastRetention();
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

  /**
   * Holds `manifest.reserve` while a session runs (made once per session, after its ledger entry is
   * on disk; not on the exit path) and gives it back when none does.
   */
  *keepReserve(dir: string, mayMake: boolean): Generator<IoOp, void, IoResult> {
    const path = join(dir, MANIFEST_RESERVE_FILENAME);
    if (this.activeSessionId === null) {
      this.reserveTried = false;
      if (!this.reserveHeld) return;
      const removed = yield { op: "unlink", path };
      if (removed.ok) this.reserveHeld = false;
      return;
    }
    if (this.reserveHeld || this.reserveTried || !mayMake) return;
    this.reserveTried = true;
    const made = yield { op: "reserve", path, bytes: RESERVE_BYTES };
    this.reserveHeld = made.ok;
  }

  /** A full disk: the reserve's space goes to the manifest. True when it was freed. */
  *freeReserve(dir: string): Generator<IoOp, boolean, IoResult> {
    if (!this.reserveHeld) return false;
    const freed = yield { op: "unlink", path: join(dir, MANIFEST_RESERVE_FILENAME) };
    if (freed.ok) this.reserveHeld = false;
    return freed.ok;
  }
}
