import { formatBytes } from "@stormlog/core";
import { isoTimestampNs, terminalText } from "@stormlog/core/internal";

/** Table cells are cut past this many characters (a phase name or job id may be any length). */
export const CELL_MAX_LENGTH = 100;
/** Free text (a warning, an anomaly's details) is cut past this many characters. */
export const LINE_MAX_LENGTH = 500;

/** Input-derived text for a line of output: escaped by `terminalText`, `-` when absent. */
export function shown(value: string | null | undefined, maxLength = LINE_MAX_LENGTH): string {
  return value === null || value === undefined ? "-" : terminalText(value, { maxLength });
}

/**
 * Input-derived text escaped as `terminalText` does, never cut: a CSV row or a path a person may
 * copy from the terminal must stay whole.
 */
export function terminalWhole(value: string): string {
  return terminalText(value, { maxLength: Number.POSITIVE_INFINITY });
}

/**
 * A warning for stderr, one line: `stormlog <command>: warning: <message>` (what the reading left
 * out or distrusted; the command's result is still written, and its exit code stays that of success).
 */
export function warningLine(command: string, message: string): string {
  return `stormlog ${command}: warning: ${shown(message)}\n`;
}

/** `+1.50 MB`, `-512.00 B`, `0 B`; `-` for unknown. */
export function signedBytes(value: number | null | undefined): string {
  if (value === null || value === undefined) return "-";
  if (value === 0) return "0 B";
  return `${value < 0 ? "-" : "+"}${formatBytes(Math.abs(value))}`;
}

/** `1.50 MB`; `-` for unknown. */
export function bytes(value: number | null | undefined): string {
  if (value === null || value === undefined) return "-";
  return formatBytes(value);
}

/** An epoch timestamp in ns as ISO-8601 UTC with nanoseconds (`isoTimestampNs`); `-` for unknown. */
export function isoNs(ns: bigint | null | undefined): string {
  return ns === null || ns === undefined ? "-" : isoTimestampNs(ns);
}

/** Seconds between two ns timestamps: `12.345 s`. */
export function durationNs(from: bigint | null, to: bigint | null): string {
  if (from === null || to === null) return "-";
  return `${(Number(to - from) / 1e9).toFixed(3)} s`;
}

/** An offset from `origin`: `+12.345s`. */
export function offsetNs(origin: bigint, ns: bigint | null | undefined): string {
  if (ns === null || ns === undefined) return "-";
  const seconds = Number(ns - origin) / 1e9;
  return `${seconds < 0 ? "-" : "+"}${Math.abs(seconds).toFixed(3)}s`;
}

/**
 * A plain-text table: a header row, a dashed rule, right-aligned columns where asked. Every cell
 * goes through `terminalText` (cells hold input-derived text: one row stays one line).
 */
export function renderTable(
  header: readonly string[],
  cells: readonly (readonly string[])[],
  rightAligned: ReadonlySet<number> = new Set(),
): string {
  const rows = cells.map((row) => row.map((cell) => terminalText(cell, { maxLength: CELL_MAX_LENGTH })));
  // A loop, not a spread: a table may have more rows than a call has room for arguments.
  const widths = header.map((title) => title.length);
  for (const row of rows)
    for (let column = 0; column < widths.length; column++)
      widths[column] = Math.max(widths[column]!, (row[column] ?? "").length);
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, column) => {
        const width = widths[column]!;
        return rightAligned.has(column) ? cell.padStart(width) : cell.padEnd(width);
      })
      .join("  ")
      .trimEnd();
  const lines = [line(header), line(widths.map((width) => "-".repeat(width)))];
  for (const row of rows) lines.push(line(row));
  return lines.join("\n");
}
