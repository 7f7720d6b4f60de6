/** What the tracker's `OffThreadSink` and its sink worker say to each other. */
import type { SessionStatus, SessionSummary, TelemetryEvent } from "@stormlog/core";
import type { TelemetrySinkOptions } from "@stormlog/sink";
import type { RecordContext } from "../records/store.js";
import type { RingBuffers, RingObject, SpillChunk } from "./record-ring.js";
import type { WriterDiagnostics } from "./writer.js";

/**
 * The sink options that cross to the worker. Functions cannot: the logger stays on the training
 * thread, and a clock or scheduler keeps the whole sink there.
 */
export type WorkerSinkOptions = Omit<TelemetrySinkOptions, "logger" | "clock" | "scheduler">;

/**
 * Requests to the worker, each for one sink (`sink` numbers them; one worker serves every sink of
 * the process). `open` carries the memory the worker shares with that sink's `OffThreadSink`.
 */
export type SinkWorkerRequest =
  | {
      readonly kind: "open";
      readonly sink: number;
      readonly options: WorkerSinkOptions;
      /** `DIAGNOSTIC_KEYS.length` doubles the worker keeps current. */
      readonly diagnostics: SharedArrayBuffer;
      /** One int32, set to 1 when `closeSync` is done. */
      readonly closed: SharedArrayBuffer;
    }
  | {
      readonly kind: "session";
      readonly sink: number;
      readonly summary: Partial<Omit<SessionSummary, "status" | "ended_at_ns">>;
    }
  | {
      /** The shared ring the tracker writes the session's stored records into (see `record-ring`). */
      readonly kind: "ring";
      readonly sink: number;
      readonly buffers: RingBuffers;
      readonly context: RecordContext;
    }
  | { readonly kind: "objects"; readonly sink: number; readonly objects: readonly RingObject[] }
  | { readonly kind: "spill"; readonly sink: number; readonly chunk: SpillChunk }
  | { readonly kind: "records"; readonly sink: number; readonly records: readonly TelemetryEvent[] }
  | { readonly kind: "close"; readonly sink: number; readonly status: SessionStatus }
  | { readonly kind: "closeSync"; readonly sink: number; readonly status: SessionStatus };

export type SinkWorkerReply =
  | { readonly kind: "log"; readonly sink: number; readonly level: "warn" | "info"; readonly message: string }
  | { readonly kind: "opened"; readonly sink: number }
  /** The session is registered and the manifest naming it is on disk. */
  | { readonly kind: "session-started"; readonly sink: number }
  | { readonly kind: "closed"; readonly sink: number }
  | { readonly kind: "failed"; readonly sink: number; readonly message: string };

/** The sink counters shared through memory, so that reading them never waits for the worker. */
export const DIAGNOSTIC_KEYS = [
  "rollover_count",
  "pruned_segment_count",
  "pruned_bytes",
  "final_retained_files",
  "final_retained_bytes",
  "dropped_events",
  "rejected_events",
  "appended_events",
  "written_events",
  "queued_events",
] as const;

/** Stores the numeric diagnostics in the shared array. */
export function writeSharedDiagnostics(into: Float64Array, diagnostics: object): void {
  const source = diagnostics as Readonly<Record<string, unknown>>;
  for (let i = 0; i < DIAGNOSTIC_KEYS.length; i++) {
    const value = source[DIAGNOSTIC_KEYS[i] as string];
    into[i] = typeof value === "number" ? value : 0;
  }
}

/** Reads the shared diagnostics back. */
export function readSharedDiagnostics(from: Float64Array): WriterDiagnostics & Record<string, number> {
  const diagnostics: Record<string, number> = {};
  for (let i = 0; i < DIAGNOSTIC_KEYS.length; i++)
    diagnostics[DIAGNOSTIC_KEYS[i] as string] = from[i] as number;
  return diagnostics;
}
