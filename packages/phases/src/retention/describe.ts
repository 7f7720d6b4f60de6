/**
 * The wording of leak verdicts: one place for what `stormlog analyze` prints and what the tracker's
 * leak alerts say (`Leak suspected: <message>`), so that both name a leak the same way.
 */
import { formatBytes } from "@stormlog/core";
import type { BirthEvidence, BirthGroup } from "./types.js";

/** A count as the messages print it: a whole number as it is, anything else with one decimal. */
export function formatCount(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

/** `float32 [2048, 2048]`. */
export function describeTensorGroup(group: BirthGroup): string {
  return `${group.dtype} [${group.shape.join(", ")}]`;
}

/** What a leaking phase keeps, by counters (see `describeKept`). */
export interface KeptParts {
  /** Tensors kept per occurrence of the unit, null when the tensor count does not leak. */
  readonly tensorsPer: number | null;
  /** Bytes kept per occurrence of the unit, null when the bytes do not leak. */
  readonly bytesPer: number | null;
  /** The repeated unit that must still hold the memory (the phase itself, or its parent). */
  readonly unitPath: string;
  /** A later sibling that gave part of the growth back and stopped short (`shortfall_sibling`), or null. */
  readonly shortfall: string | null;
}

/**
 * "`train / backward` keeps 1.00 MB per `train`, still held as it comes around again", then
 * `ranks` (the analysis lists the leaking ranks of several; "" for one rank) and, when a sibling
 * stopped short, the other reading counters allow.
 */
export function describeKept(phasePath: string, parts: KeptParts, ranks = ""): string {
  const label = `\`${phasePath}\``;
  const per = parts.unitPath === phasePath ? "per occurrence" : `per \`${parts.unitPath}\``;
  const kept: string[] = [];
  if (parts.tensorsPer !== null)
    kept.push(`${formatCount(parts.tensorsPer)} tensor${parts.tensorsPer === 1 ? "" : "s"}`);
  if (parts.bytesPer !== null) kept.push(formatBytes(parts.bytesPer));
  let text = `${label} keeps ${kept.join(", ")} ${per}, still held as it comes around again${ranks}`;
  if (parts.shortfall !== null)
    text +=
      `; or \`${parts.shortfall}\` frees less than ${label} allocated and keeps its own: ` +
      "counters cannot tell these apart (tfjs birth-phase attribution can)";
  return text;
}

/**
 * "`train / backward`: 1 tensor (16.00 MB, float32 [2048, 2048]) born here per step is still alive
 * 30 steps later (step: `train`); 31 alive now (496.00 MB), largest: ...", then `ranks` ("" for one).
 */
export function describeBirths(phasePath: string, births: BirthEvidence, ranks = ""): string {
  const label = `\`${phasePath}\``;
  const count = births.tensors_per_occurrence;
  const top = births.largest[0];
  const each = top !== undefined && top.count > 0 ? `, ${describeTensorGroup(top)}` : "";
  const step = births.unit_path === births.birth_phase ? "occurrence" : "step";
  let text =
    `${label}: ${formatCount(count)} tensor${count === 1 ? "" : "s"} (${formatBytes(births.bytes_per_occurrence)}${each}) ` +
    `born here per ${step} ${count === 1 ? "is" : "are"} still alive ${births.alive_for_occurrences} ${step}s later`;
  if (step === "step") text += ` (step: \`${births.unit_path}\`)`;
  text += `; ${births.live_tensors} alive now (${formatBytes(births.live_bytes)})`;
  if (births.largest.length > 0)
    text += `, largest: ${births.largest.map((g) => `${g.count} x ${describeTensorGroup(g)} (${formatBytes(g.bytes)})`).join(", ")}`;
  return text + ranks;
}

/** What a leaking parent's message says when a leaking child keeps its growth. */
export function describeKeptInside(childPath: string): string {
  return `; the growth is kept inside \`${childPath}\``;
}

/** A judged path under a leaking parent, for `describeGrowthInside`. */
export interface JudgedInside {
  readonly path: string;
  readonly leaking: boolean;
  /** Judged on its own occurrences rather than as a part of the parent's unit. */
  readonly ownUnit: boolean;
}

/**
 * The note on a leaking parent: the deepest leaking descendant judged as a part of its unit, or, when
 * it has judged descendants and none of them stands out, that the readings do not single one out.
 */
export function describeGrowthInside(parentPath: string, judged: readonly JudgedInside[]): string {
  const prefix = `${parentPath} / `;
  let deepest: string | undefined;
  let depth = 0;
  let inside = false;
  for (const candidate of judged) {
    if (!candidate.path.startsWith(prefix)) continue;
    inside = true;
    if (!candidate.leaking || candidate.ownUnit) continue;
    const d = candidate.path.split(" / ").length;
    if (d > depth) {
      deepest = candidate.path;
      depth = d;
    }
  }
  if (deepest !== undefined) return describeKeptInside(deepest);
  return inside
    ? "; no phase inside it keeps the growth clearly (its readings are too noisy to tell, or its own code keeps it)"
    : "";
}
