import {
  closeSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { resolveDistributedIdentity, type SessionSummary, StormlogError } from "@stormlog/core";
import { nodeCrypto, openRegularFileSync } from "@stormlog/core/internal";
import { writerDirectoryName } from "./layout.js";

/** The lock a writing process keeps in its sink directory (the Python reference ignores the file). */
export const WRITER_LOCK_FILENAME = "writer.lock";

/** Who holds a sink directory: the lock file's content. */
export interface WriterLockOwner {
  readonly host: string;
  readonly pid: number;
  /** Epoch ms the holder process started (Linux), to tell a reused pid from the holder. */
  readonly process_started_at_ms: number | null;
  readonly acquired_at_ns: string;
  /** Tells this acquisition apart from any other (a stale lock is broken only if it is still the one judged). */
  readonly token: string;
}

/** What a process does when another live process writes the directory it was given. */
export type LockedDirectoryPolicy = "beside" | "refuse";

const LOCKED_MARKER = Symbol.for("stormlog.error.sink_directory_locked");

/** Another live process writes this sink directory, and the sink was told to refuse rather than write beside it. */
export class SinkDirectoryLockedError extends StormlogError {
  readonly [LOCKED_MARKER] = true;
  override readonly name = "SinkDirectoryLockedError";
  readonly directory: string;
  readonly owner: WriterLockOwner;

  constructor(directory: string, owner: WriterLockOwner) {
    super(
      `${directory} is being written by pid ${owner.pid} on ${owner.host}: give this process its own sink ` +
        `directory, or let it write beside (onLockedDirectory: "beside"); if that writer is gone, delete ` +
        `${join(directory, WRITER_LOCK_FILENAME)}`,
    );
    this.directory = directory;
    this.owner = owner;
  }

  static override isInstance(error: unknown): error is SinkDirectoryLockedError {
    return StormlogError.hasMarker(error, LOCKED_MARKER);
  }
}

/**
 * Lock files this thread holds, by path, with their tokens (two sinks of one process exclude each
 * other too). Another thread of this process (the tracker's sink worker) has its own map: its locks
 * are told by the process's start time (`isHolderAlive`).
 */
const heldByThisProcess = new Map<string, string>();

/** When this process started (epoch ms, Linux), read once: the same for all its threads. */
let ownStartedAtMs: number | null | undefined;
function thisProcessStartedAtMs(): number | null {
  if (ownStartedAtMs === undefined) ownStartedAtMs = processStartedAtMs(process.pid);
  return ownStartedAtMs;
}

/** Directories beside a held one that one process tries (`-2`, `-3` … after the first): one per sink. */
const BESIDE_TRIES = 16;

/** A held lock on a sink directory. */
export class WriterLock {
  private released = false;

  constructor(
    readonly directory: string,
    readonly owner: WriterLockOwner,
  ) {}

  /**
   * Puts the lock file back after its directory was removed and made again, so that another writer
   * sees this one. False when another writer took the directory meanwhile (or this lock was released).
   */
  renew(): boolean {
    if (this.released) return false;
    const path = join(this.directory, WRITER_LOCK_FILENAME);
    // Still in place (the directory stayed): nothing to write, which a full disk would refuse.
    if (readOwner(path)?.token === this.owner.token) return true;
    if (createExclusive(path, this.owner)) {
      heldByThisProcess.set(path, this.owner.token);
      return true;
    }
    return readOwner(path)?.token === this.owner.token;
  }

  /**
   * Gives the directory up (idempotent). Removes the file only while it is still this lock's. False
   * when the file could not be removed (a directory turned read-only): the lock is kept then, as
   * other writers still see it.
   */
  release(): boolean {
    if (this.released) return true;
    const path = join(this.directory, WRITER_LOCK_FILENAME);
    try {
      if (readOwner(path)?.token === this.owner.token) unlinkSync(path);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EACCES" || code === "EPERM" || code === "EROFS") return false;
      // Otherwise a lock left behind is broken by the next writer once this process is gone.
    }
    this.released = true;
    if (heldByThisProcess.get(path) === this.owner.token) heldByThisProcess.delete(path);
    return true;
  }
}

/** The result of claiming: the directory to write (the one asked for, or one beside its live writer). */
export interface ClaimedSinkDirectory {
  readonly directory: string;
  readonly lock: WriterLock;
  /** The live writer of the asked-for directory, when this process was moved beside it. */
  readonly movedAsideFrom: WriterLockOwner | null;
}

export interface ClaimOptions {
  readonly policy?: LockedDirectoryPolicy;
  /** This process's rank, to name the directory beside (default: from the launcher's environment, else none). */
  readonly rank?: number;
}

/**
 * Takes `directory` for this process: creates it, and its lock unless another live process holds
 * it (a lock left by a dead process on this host is broken). When held: `beside` (the default)
 * claims `<directory>/rank-<rank>-<host>-<pid>` (or `writer-<host>-<pid>` without a rank) instead,
 * which readers given `directory` load with it; `refuse` throws `SinkDirectoryLockedError`.
 * Nothing is written into the directory before the lock is held. File-system errors are thrown.
 */
export function claimSinkDirectory(directory: string, options: ClaimOptions = {}): ClaimedSinkDirectory {
  const first = tryLock(directory);
  if (first instanceof WriterLock) return { directory, lock: first, movedAsideFrom: null };
  if (options.policy === "refuse") throw new SinkDirectoryLockedError(directory, first);
  const rank = options.rank ?? rankFromEnvironment();
  const name = writerDirectoryName(rank === undefined ? {} : { rank });
  // Only a process with this very pid on this host could hold these: that is this process, whose
  // other sinks (or threads) write there; each takes the next one.
  let holder: WriterLockOwner = first;
  for (let k = 1; k <= BESIDE_TRIES; k++) {
    const beside = join(directory, k === 1 ? name : `${name}-${k}`);
    const taken = tryLock(beside);
    if (taken instanceof WriterLock) return { directory: beside, lock: taken, movedAsideFrom: first };
    holder = taken;
  }
  throw new SinkDirectoryLockedError(join(directory, `${name}-${BESIDE_TRIES}`), holder);
}

/** This lock, or the live owner that holds the directory. */
function tryLock(directory: string): WriterLock | WriterLockOwner {
  mkdirSync(directory, { recursive: true });
  const path = join(directory, WRITER_LOCK_FILENAME);
  for (let attempt = 0; attempt < 8; attempt++) {
    const owner = newOwner();
    if (createExclusive(path, owner)) {
      heldByThisProcess.set(path, owner.token);
      return new WriterLock(directory, owner);
    }
    const holder = readOwner(path);
    if (holder === undefined) continue; // removed meanwhile: try again
    if (holder !== null && isHolderAlive(path, holder)) return holder;
    breakStaleLock(path, holder);
  }
  const holder = readOwner(path);
  if (holder !== null && holder !== undefined) return holder;
  throw new StormlogError(
    `could not take ${path}: other processes keep replacing it; delete it if no process writes ${directory}`,
  );
}

function newOwner(): WriterLockOwner {
  return {
    host: hostname(),
    pid: process.pid,
    process_started_at_ms: thisProcessStartedAtMs(),
    acquired_at_ns: (BigInt(Date.now()) * 1_000_000n).toString(),
    token: nodeCrypto().randomUUID(),
  };
}

/** Creates the lock file whole or not at all: written aside, then hard-linked into place (fails if present). */
function createExclusive(path: string, owner: WriterLockOwner): boolean {
  const text = `${JSON.stringify(owner)}\n`;
  const temporary = `${path}.${owner.token}`;
  try {
    writeWhole(temporary, text, "wx");
  } catch (error) {
    // Cut short by a full disk: the empty file must not stay behind, one per retry.
    removeIfThere(temporary);
    throw error;
  }
  try {
    linkSync(temporary, path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    if (!isLinkUnsupported(error)) throw error;
    // File systems without hard links: an exclusive create (a crash mid-write leaves an unreadable lock).
    try {
      writeWhole(path, text, "wx");
      return true;
    } catch (created) {
      if ((created as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw created;
    }
  } finally {
    removeIfThere(temporary);
  }
}

function removeIfThere(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Already gone.
  }
}

function isLinkUnsupported(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code === "EPERM" || code === "ENOTSUP" || code === "EOPNOTSUPP" || code === "ENOSYS";
}

function writeWhole(path: string, text: string, flags: string): void {
  const fd = openSync(path, flags, 0o644);
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
}

/** How far from its lock's taking a session of the lock's holder starts (the sink opens, then starts it). */
const LOCK_SESSION_SLACK_NS = 10_000_000_000n;
/** A lock file is a line of JSON: more is no lock this package wrote. */
const MAX_LOCK_BYTES = 4096;

/**
 * The lock's owner; null when the file holds no readable owner (or is no regular file, or too large
 * to be one: never waited on); undefined when there is no file.
 */
export function readOwner(path: string): WriterLockOwner | null | undefined {
  let text: string;
  let fd: number;
  try {
    fd = openRegularFileSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "EFTYPE" || code === "EISDIR") return null;
    throw error;
  }
  try {
    const buffer = Buffer.alloc(MAX_LOCK_BYTES + 1);
    const length = readSync(fd, buffer, 0, buffer.length, 0);
    if (length > MAX_LOCK_BYTES) return null;
    text = buffer.toString("utf8", 0, length);
  } finally {
    closeSync(fd);
  }
  try {
    const value = JSON.parse(text) as Partial<WriterLockOwner>;
    if (typeof value.host !== "string" || typeof value.pid !== "number" || typeof value.token !== "string")
      return null;
    return {
      host: value.host,
      pid: value.pid,
      process_started_at_ms:
        typeof value.process_started_at_ms === "number" ? value.process_started_at_ms : null,
      acquired_at_ns: typeof value.acquired_at_ns === "string" ? value.acquired_at_ns : "0",
      token: value.token,
    };
  } catch {
    return null;
  }
}

/** Whether the holder may still write: another host's always counts as alive (its pid cannot be checked here). */
function isHolderAlive(path: string, holder: WriterLockOwner): boolean {
  if (holder.host !== hostname()) return true;
  if (holder.pid === process.pid) {
    if (heldByThisProcess.get(path) === holder.token) return true;
    // Taken by another thread of this very process (same start), or left by an earlier process that
    // had this pid (a restarted container): only the first still writes.
    const started = thisProcessStartedAtMs();
    return started !== null && holder.process_started_at_ms === started;
  }
  return isProcessRunning(holder.pid, holder.process_started_at_ms);
}

/**
 * Moves a dead writer's lock away, only if it is still the one judged dead (another process may have
 * broken it and taken the directory meanwhile: that lock is put back). An unreadable lock (`null`)
 * is broken too: a process that crashed while creating it on a file system without hard links.
 */
function breakStaleLock(path: string, judged: WriterLockOwner | null): void {
  const aside = `${path}.stale-${process.pid}-${nodeCrypto().randomUUID()}`;
  try {
    renameSync(path, aside);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  const moved = readOwner(aside);
  if (judged !== null && moved?.token !== judged.token) {
    try {
      linkSync(aside, path);
    } catch {
      // A third process took the directory meanwhile: it holds it now.
    }
  }
  removeIfThere(aside);
}

/**
 * True while `pid` runs on this host and is the process that started at `startedAtMs` (when given;
 * a later start means the pid was reused after the writer died).
 */
export function isProcessRunning(pid: number, startedAtMs: number | null): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  if (startedAtMs === null) return true;
  const now = processStartedAtMs(pid);
  // Clock ticks make the start time exact to 10 ms; boot-time rounding adds up to a second.
  return now === null || Math.abs(now - startedAtMs) <= 2000;
}

/**
 * Whether the writer of a `running` session is gone: it ran on this host and its pid no longer runs
 * a process started before the session. Unknown (another host, no pid) is not gone.
 */
export function isSessionWriterGone(host: string, pid: number, startedAtNs: bigint | null): boolean {
  if (host !== hostname() || !Number.isSafeInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "EPERM";
  }
  if (startedAtNs === null) return false;
  const processStart = processStartedAtMs(pid);
  // A process that started after the session did cannot be its writer: the pid was reused.
  return processStart !== null && processStart > Number(startedAtNs / 1_000_000n) + 2000;
}

let bootTimeMs: number | null | undefined;

/** When `pid` started (epoch ms) from /proc, or null where there is no /proc. */
function processStartedAtMs(pid: number): number | null {
  try {
    if (bootTimeMs === undefined) {
      const match = /^btime (\d+)$/m.exec(readFileSync("/proc/stat", "utf8"));
      bootTimeMs = match === null ? null : Number(match[1]) * 1000;
    }
    if (bootTimeMs === null) return null;
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces and parentheses); starttime is field 22.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ticks = Number(fields[19]);
    // USER_HZ is 100 on every Linux architecture Node runs on.
    return Number.isFinite(ticks) ? bootTimeMs + ticks * 10 : null;
  } catch {
    return null;
  }
}

/** The launcher's rank (torchrun, Open MPI, Slurm variables), if this process runs in a job of several. */
function rankFromEnvironment(): number | undefined {
  try {
    const identity = resolveDistributedIdentity({}, { env: process.env });
    return identity.world_size > 1 ? identity.rank : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The ledger of the sink in `dir` as readers report it: a `running` session whose writer is gone is
 * `interrupted`, as the next writer's recovery will record it. The writer is the directory's lock
 * holder for the session it started as it took the lock (a `stormlog track` session names the tracked
 * child's pid, which may outlive it), else the session's pid (the Python reference's writers take no
 * lock); gone means it ran on this host and its pid no longer runs the process that started it. The
 * Python reference reports `running` until a writer reopens the directory.
 */
export function settleAbandonedSessions<T extends SessionSummary>(sessions: readonly T[], dir: string): T[] {
  if (!sessions.some((summary) => summary.status === "running")) return [...sessions];
  const lockPath = join(dir, WRITER_LOCK_FILENAME);
  let holder: WriterLockOwner | null | undefined;
  try {
    holder = readOwner(lockPath);
  } catch {
    holder = undefined;
  }
  // The lock speaks for the sessions its holder started: a writer starts its session as it takes the
  // directory (within seconds), so a lock a killed writer left does not judge a session begun later by
  // a writer that takes none (Python), nor one begun before.
  let lockSays: boolean | null = null;
  let acquiredAtNs = 0n;
  if (holder !== undefined && holder !== null) {
    const ownProcess = holder.host === hostname() && holder.pid === process.pid;
    lockSays = !ownProcess && !isHolderAlive(lockPath, holder);
    acquiredAtNs = /^\d+$/.test(holder.acquired_at_ns) ? BigInt(holder.acquired_at_ns) : 0n;
  }
  return sessions.map((summary) => {
    if (summary.status !== "running") return summary;
    const started = summary.started_at_ns;
    const byLock =
      lockSays !== null &&
      started >= acquiredAtNs - LOCK_SESSION_SLACK_NS &&
      started <= acquiredAtNs + LOCK_SESSION_SLACK_NS
        ? lockSays
        : null;
    return (byLock ?? isSessionWriterGone(summary.host, summary.pid, summary.started_at_ns))
      ? { ...summary, status: "interrupted" }
      : summary;
  });
}
