/**
 * Python's text forms of numbers, reproduced exactly: `repr(float)`, `f"{x:.Nf}"` and `str()` of
 * the scalars that end up in synthetic session ids. Files and ids written by the Python reference
 * use them, so matching bytes (and matching ids) depend on them.
 */

/**
 * Python's `repr(x)` (and `str(x)`) for a float: the shortest digits that read back to the same
 * double, in fixed notation for 1e-4 <= |x| < 1e16 and scientific otherwise, e.g. `1.0`, `0.1`,
 * `1e-05`, `1e+16`, `-0.0`, `nan`, `inf`.
 */
export function pythonFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (x === Number.POSITIVE_INFINITY) return "inf";
  if (x === Number.NEGATIVE_INFINITY) return "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  // toExponential() without an argument gives the same shortest round-trip digits as Python.
  const [mantissa = "", exponentText = "0"] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exponent = Number(exponentText);
  // Python's decimal-point position: value = 0.<digits> * 10^decpt.
  const decpt = exponent + 1;
  if (decpt > 16 || decpt <= -4) {
    const head = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const expSign = exponent < 0 ? "-" : "+";
    return `${sign}${head}e${expSign}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  if (decpt <= 0) return `${sign}0.${"0".repeat(-decpt)}${digits}`;
  if (decpt >= digits.length) return `${sign}${digits}${"0".repeat(decpt - digits.length)}.0`;
  return `${sign}${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
}

const float64 = new DataView(new ArrayBuffer(8));

/** The exact value of a finite, non-negative double as `mantissa * 2^exponent`. */
function exactBinary(x: number): { mantissa: bigint; exponent: number } {
  float64.setFloat64(0, x);
  const high = float64.getUint32(0);
  const low = float64.getUint32(4);
  const biased = (high >>> 20) & 0x7ff;
  let mantissa = (BigInt(high & 0xfffff) << 32n) | BigInt(low);
  let exponent: number;
  if (biased === 0) {
    exponent = -1074;
  } else {
    mantissa |= 1n << 52n;
    exponent = biased - 1075;
  }
  return { mantissa, exponent };
}

/**
 * Python's `f"{x:.{digits}f}"`: fixed notation rounded half-to-even on the exact binary value
 * (JavaScript's `toFixed` rounds exact ties away from zero: `(1.125).toFixed(2)` is `1.13`, Python
 * prints `1.12`). Keeps the sign of negative zero and of negatives that round to zero (`-0.00`).
 */
export function pythonFormatFixed(x: number, digits: number): string {
  if (!Number.isInteger(digits) || digits < 0 || digits > 100) {
    throw new RangeError(`digits must be an integer from 0 to 100, got ${digits}`);
  }
  if (Number.isNaN(x)) return "nan";
  if (x === Number.POSITIVE_INFINITY) return "inf";
  if (x === Number.NEGATIVE_INFINITY) return "-inf";
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  const { mantissa, exponent } = exactBinary(Math.abs(x));
  const scale = 10n ** BigInt(digits);
  let scaled: bigint;
  if (exponent >= 0) {
    scaled = (mantissa << BigInt(exponent)) * scale;
  } else {
    const numerator = mantissa * scale;
    const denominator = 1n << BigInt(-exponent);
    const quotient = numerator / denominator;
    const twiceRemainder = (numerator % denominator) * 2n;
    const roundUp =
      twiceRemainder > denominator || (twiceRemainder === denominator && (quotient & 1n) === 1n);
    scaled = roundUp ? quotient + 1n : quotient;
  }
  const text = scaled.toString().padStart(digits + 1, "0");
  if (digits === 0) return `${sign}${text}`;
  return `${sign}${text.slice(0, -digits)}.${text.slice(-digits)}`;
}

/** A scalar that Python's `str()` is applied to when building ids. */
export type PythonScalar = string | number | bigint | boolean;

/**
 * Python's `str(value)` for a decoded JSON scalar: strings as they are, integers in decimal,
 * non-integral numbers through {@link pythonFloatRepr}, booleans as `True`/`False`.
 *
 * A JSON float token with an integral value (`1700000001.0`) decodes to the same JavaScript number
 * as the integer `1700000001`, so it prints without the `.0` that Python would add; pass
 * `{ float: true }` when the caller knows the value was a float.
 */
export function pythonStr(value: PythonScalar, options: { float?: boolean } = {}): string {
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "bigint") return value.toString();
  if (!options.float && Number.isSafeInteger(value)) return String(value);
  return pythonFloatRepr(value);
}
