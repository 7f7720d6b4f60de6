/**
 * CSV export of telemetry records: one row per record, the reference's columns in its order
 * (`telemetry_event_to_dict`), and, unlike the reference's pandas export (whose `metadata` column
 * is a Python dict repr that its own readers cannot parse back), `metadata` as a JSON object with
 * exact integers, so nothing is lost.
 */
import { type JsonObject, stringifyJson, TELEMETRY_V3_FIELDS, type TelemetryEvent } from "@stormlog/core";
import { counterText, type ExactCounterField } from "@stormlog/core/internal";

/** The CSV columns, in the reference's record order. */
export const TELEMETRY_CSV_COLUMNS: readonly string[] = TELEMETRY_V3_FIELDS;

/** The counter columns (`counterText` writes them past 2^53). */
const COUNTERS: ReadonlySet<string> = new Set(
  TELEMETRY_CSV_COLUMNS.filter((column) => column.endsWith("_bytes")),
);

/**
 * A spreadsheet reads a cell starting with one of these as a formula (OWASP "CSV injection"); after
 * leading spaces too, as importers that trim them read it.
 */
const FORMULA_START = /^[ ]*[=+\-@\t\r]/;
/** A negative decimal number (a DECIMAL column's text): a spreadsheet reads it as the number it is. */
const NEGATIVE_NUMBER = /^-\d+(\.\d+)?$/;

/**
 * RFC 4180 quoting: fields with a comma, quote, CR or LF (or edge spaces) are quoted. A text that a
 * spreadsheet would run as a formula (`=HYPERLINK(...)`, `+`, `-`, `@`, tab or CR first, after any
 * spaces) gets a leading `'` and quotes, as OWASP advises: the cell then shows the text instead of
 * running it. A negative decimal number is left as it is: no formula starts that way.
 */
export function csvField(value: string): string {
  if (value === "") return '""';
  if (FORMULA_START.test(value) && !NEGATIVE_NUMBER.test(value)) return `"'${value.replaceAll('"', '""')}"`;
  if (/[",\r\n]/.test(value) || value.trim() !== value) return `"${value.replaceAll('"', '""')}"`;
  return value;
}

function cell(value: unknown): string {
  if (value === null || value === undefined) return "";
  switch (typeof value) {
    case "string":
      return csvField(value);
    case "number":
    case "bigint":
      return String(value);
    case "boolean":
      return value ? "true" : "false";
    default:
      return csvField(stringifyJson(value as JsonObject, { sortKeys: true }));
  }
}

/** The header line (no line break). */
export function telemetryCsvHeader(): string {
  return TELEMETRY_CSV_COLUMNS.join(",");
}

/**
 * One record as a CSV line (no line break): null counters are empty cells, `timestamp_ns` keeps
 * every digit, `metadata` is its JSON (keys sorted, Python formatting, exact integers).
 */
export function telemetryEventToCsvRow(event: TelemetryEvent): string {
  const record = event as unknown as Record<string, unknown>;
  let line = "";
  for (let index = 0; index < TELEMETRY_CSV_COLUMNS.length; index++) {
    if (index > 0) line += ",";
    const column = TELEMETRY_CSV_COLUMNS[index]!;
    const value = record[column];
    // A counter past 2^53 keeps every digit (the exact value read, not its nearest double).
    line +=
      typeof value === "number" && !Number.isSafeInteger(value) && COUNTERS.has(column)
        ? counterText(event, column as ExactCounterField)
        : cell(value);
  }
  return line;
}

/** The header then one line per record, each ending with `\n`; streams (nothing is retained). */
export async function* telemetryCsvLines(
  events: Iterable<TelemetryEvent> | AsyncIterable<TelemetryEvent>,
): AsyncGenerator<string> {
  yield `${telemetryCsvHeader()}\n`;
  for await (const event of events) yield `${telemetryEventToCsvRow(event)}\n`;
}
