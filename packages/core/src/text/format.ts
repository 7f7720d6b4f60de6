import { pythonFormatFixed } from "./pyrepr.js";

const BYTE_UNITS = ["B", "KB", "MB", "GB", "TB", "PB"] as const;

/**
 * A byte count for people, exactly as the Python reference's `format_bytes` writes it: powers of
 * 1024, units B/KB/MB/GB/TB/PB, `precision` decimals (`"512.00 B"`, `"1.50 KB"`, `"0 B"` for zero).
 * Ties round half-to-even like Python (`1152` bytes is `"1.12 KB"`). Like the reference, a negative
 * count keeps its sign and is not scaled (`-2048` is `"-2048.00 B"`): format the magnitude and add
 * the sign yourself when you want `-2.00 KB`.
 */
export function formatBytes(bytes: number | bigint, precision = 2): string {
  if (bytes === 0 || bytes === 0n) return "0 B";
  // Number(bigint) rounds to nearest-even, as Python's float(int) does.
  let size = Number(bytes);
  let unit = 0;
  while (size >= 1024 && unit < BYTE_UNITS.length - 1) {
    size /= 1024;
    unit++;
  }
  return `${pythonFormatFixed(size, precision)} ${BYTE_UNITS[unit]}`;
}

/** The largest epoch second a `Date` (and so ISO-8601 here) can show: 8.64e15 ms. */
const MAX_DATE_SECONDS = 8_640_000_000_000n;

/**
 * An epoch timestamp in nanoseconds as ISO-8601 UTC with all nine fraction digits
 * (`2025-12-06T05:55:12.105815000Z`): exact, where a `Date` would keep milliseconds only. Beyond
 * the years ±275,760 (input no clock wrote), the nanoseconds themselves (`10000000000000000000000 ns`).
 */
export function isoTimestampNs(ns: bigint): string {
  const seconds = ns / 1_000_000_000n;
  let fraction = ns % 1_000_000_000n;
  let whole = seconds;
  // Before 1970 the remainder is negative: borrow a second.
  if (fraction < 0n) {
    fraction += 1_000_000_000n;
    whole -= 1n;
  }
  if (whole > MAX_DATE_SECONDS || whole < -MAX_DATE_SECONDS) return `${ns} ns`;
  // Without the milliseconds (`.sssZ`): years past 9999 take six digits and a sign.
  const iso = new Date(Number(whole) * 1000).toISOString();
  const base = iso.slice(0, iso.length - 5);
  return `${base}.${fraction.toString().padStart(9, "0")}Z`;
}
