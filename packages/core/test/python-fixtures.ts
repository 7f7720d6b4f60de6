import { readFileSync } from "node:fs";

/** What CPython printed for the values the tests check (see fixtures/generate_python_fixtures.py). */
export interface PythonExpectations {
  python: string;
  float_repr: [bits: string, repr: string][];
  format_fixed: [bits: string, digits: number, text: string][];
  format_bytes: [bytes: string, text: string][];
  format_bytes_precision: [bytes: string, precision: number, text: string][];
  uuid5_url: [name: string, uuid: string][];
  stable_legacy_session_id: [parts: EncodedPart[], id: string][];
  legacy_timestamp_ns: [bits: string, ns: string][];
  legacy_memory_mb: [bits: string, bytes: string][];
}

export type EncodedPart =
  | { none: true }
  | { bool: boolean }
  | { int: string }
  | { float: string }
  | { str: string };

/** The reference's synthetic id for these parts, looked up in the fixture (strings and decimal ints only). */
export function pythonLegacyId(parts: (string | number)[]): string {
  const key = JSON.stringify(parts.map(String));
  for (const [encoded, id] of python.stable_legacy_session_id) {
    const plain = encoded.map((part) =>
      "str" in part
        ? part.str
        : "int" in part
          ? part.int
          : "float" in part
            ? pyFloatText(part.float)
            : undefined,
    );
    if (JSON.stringify(plain) === key) return id;
  }
  throw new Error(`no Python id for ${key} in the fixture; add it to generate_python_fixtures.py`);
}

function pyFloatText(bits: string): string {
  const value = fromBits(bits);
  return Number.isInteger(value) ? `${value}.0` : String(value);
}

export const python: PythonExpectations = JSON.parse(
  readFileSync(new URL("./fixtures/python-expectations.json", import.meta.url), "utf8"),
);

/** The double whose IEEE-754 big-endian bits are `hex`. */
export function fromBits(hex: string): number {
  return Buffer.from(hex, "hex").readDoubleBE(0);
}
