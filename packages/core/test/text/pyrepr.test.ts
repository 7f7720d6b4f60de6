import { describe, expect, it } from "vitest";
import { pythonFloatRepr, pythonFormatFixed, pythonStr } from "../../src/text/pyrepr.js";
import { fromBits, python } from "../python-fixtures.js";

describe("pythonFloatRepr", () => {
  it(`matches CPython ${python.python} repr() for ${python.float_repr.length} doubles`, () => {
    const mismatches = python.float_repr
      .map(([bits, expected]) => ({ bits, expected, actual: pythonFloatRepr(fromBits(bits)) }))
      .filter(({ expected, actual }) => expected !== actual);
    expect(mismatches).toEqual([]);
  });

  it("switches to exponent notation where Python does", () => {
    expect(pythonFloatRepr(1)).toBe("1.0");
    expect(pythonFloatRepr(0.0001)).toBe("0.0001");
    expect(pythonFloatRepr(0.00001)).toBe("1e-05");
    expect(pythonFloatRepr(1e15)).toBe("1000000000000000.0");
    expect(pythonFloatRepr(1e16)).toBe("1e+16");
    expect(pythonFloatRepr(-1.5e300)).toBe("-1.5e+300");
    expect(pythonFloatRepr(-0)).toBe("-0.0");
    expect(pythonFloatRepr(Number.NaN)).toBe("nan");
    expect(pythonFloatRepr(Number.NEGATIVE_INFINITY)).toBe("-inf");
  });
});

describe("pythonFormatFixed", () => {
  it(`matches CPython f"{x:.Nf}" for ${python.format_fixed.length} cases`, () => {
    const mismatches = python.format_fixed
      .map(([bits, digits, expected]) => ({
        bits,
        digits,
        expected,
        actual: pythonFormatFixed(fromBits(bits), digits),
      }))
      .filter(({ expected, actual }) => expected !== actual);
    expect(mismatches).toEqual([]);
  });

  it("rounds exact ties to even, unlike toFixed", () => {
    expect((1.125).toFixed(2)).toBe("1.13");
    expect(pythonFormatFixed(1.125, 2)).toBe("1.12");
    expect(pythonFormatFixed(1.375, 2)).toBe("1.38");
    expect(pythonFormatFixed(0.5, 0)).toBe("0");
    expect(pythonFormatFixed(1.5, 0)).toBe("2");
    expect(pythonFormatFixed(-0.001, 2)).toBe("-0.00");
  });

  it("rejects a digit count Python would not print", () => {
    expect(() => pythonFormatFixed(1, -1)).toThrow(RangeError);
    expect(() => pythonFormatFixed(1, 1.5)).toThrow(RangeError);
  });
});

describe("pythonStr", () => {
  it("prints scalars as Python's str() does", () => {
    expect(pythonStr("host-a")).toBe("host-a");
    expect(pythonStr(1234)).toBe("1234");
    expect(pythonStr(-1)).toBe("-1");
    expect(pythonStr(1_700_000_000_000_000_000n)).toBe("1700000000000000000");
    expect(pythonStr(1700000000.25)).toBe("1700000000.25");
    expect(pythonStr(1700000001)).toBe("1700000001");
    expect(pythonStr(1700000001, { float: true })).toBe("1700000001.0");
    expect(pythonStr(true)).toBe("True");
    expect(pythonStr(false)).toBe("False");
  });
});
