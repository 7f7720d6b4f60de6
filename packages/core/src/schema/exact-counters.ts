/**
 * Memory counters past 2^53, read exactly. A record's counter fields are doubles; the rare counter
 * a double cannot hold exactly (a corrupt reading, an unsigned sentinel) is kept here, beside the
 * decoded record, as the `bigint` read from the line, while the field holds its nearest double.
 * The analyses that must agree with the Python reference (whose integers are unbounded) read the
 * exact value through `counterValue`; everything else reads the field as usual.
 */

/** The counter fields of a record that may carry an exact value here. */
export type ExactCounterField =
  | "allocator_allocated_bytes"
  | "allocator_reserved_bytes"
  | "allocator_active_bytes"
  | "allocator_inactive_bytes"
  | "allocator_change_bytes"
  | "device_used_bytes"
  | "device_free_bytes"
  | "device_total_bytes";

/** The exact values of a record's counters past 2^53, by field. */
export type ExactCounters = Readonly<Partial<Record<ExactCounterField, bigint>>>;

// Weak: an exact value lives as long as its record, and records without one cost nothing.
const exactByRecord = new WeakMap<object, ExactCounters>();

/** Notes the exact counters of a decoded record (by the decoders). */
export function setExactCounters(record: object, exact: ExactCounters): void {
  exactByRecord.set(record, exact);
}

/** The exact values of the record's counters past 2^53, or undefined when it has none. */
export function exactCountersOf(record: object): ExactCounters | undefined {
  return exactByRecord.get(record);
}

/** A counter of a record exactly: the `bigint` read for one past 2^53, else the field's value. */
export function counterValue(
  record: Readonly<Record<ExactCounterField, number | null>>,
  field: ExactCounterField,
): number | bigint | null {
  return exactByRecord.get(record)?.[field] ?? record[field];
}

/**
 * A counter of a record as the reference writes its int: digits, exact past 2^53 (the `bigint` read,
 * else the integral double's own digits, where `String()` would write a rounded or exponent form);
 * `null` for null.
 */
export function counterText(
  record: Readonly<Record<ExactCounterField, number | null>>,
  field: ExactCounterField,
): string {
  const value = record[field];
  if (value === null) return "null";
  if (Number.isSafeInteger(value)) return String(value);
  const exact = exactByRecord.get(record)?.[field];
  if (exact !== undefined) return exact.toString();
  return Number.isInteger(value) ? BigInt(value).toString() : String(value);
}

function bitLength(value: bigint): number {
  return value.toString(2).length;
}

/**
 * Python's `a / b` for integers: the exact quotient rounded once to the nearest double (ties to
 * even). `Number(a) / Number(b)` rounds three times, which differs past 2^53.
 */
export function exactQuotient(a: bigint, b: bigint): number {
  if (b === 0n) throw new RangeError("division by zero");
  const negative = a < 0n !== b < 0n;
  const x = a < 0n ? -a : a;
  const y = b < 0n ? -b : b;
  if (x === 0n) return negative ? -0 : 0;
  // A quotient of at least 55 bits; a remainder is folded into its lowest bit (below the rounding
  // position), so converting it to a double rounds as the exact quotient does.
  const shift = 55 - (bitLength(x) - bitLength(y));
  const numerator = shift >= 0 ? x << BigInt(shift) : x;
  const denominator = shift >= 0 ? y : y << BigInt(-shift);
  const quotient = numerator / denominator;
  const sticky = numerator % denominator === 0n ? quotient : quotient | 1n;
  const magnitude = Number(sticky) * 2 ** -shift;
  return negative ? -magnitude : magnitude;
}
