import { describe, expect, it } from "vitest";
import { formatBytes, isoTimestampNs } from "../../src/text/format.js";
import { python } from "../python-fixtures.js";

describe("formatBytes", () => {
  it(`matches the reference's format_bytes for ${python.format_bytes.length} counts (number and bigint)`, () => {
    const mismatches: unknown[] = [];
    for (const [text, expected] of python.format_bytes) {
      const big = BigInt(text);
      if (formatBytes(big) !== expected) mismatches.push({ text, expected, actual: formatBytes(big) });
      const small = Number(text);
      if (Number.isSafeInteger(small) && formatBytes(small) !== expected) {
        mismatches.push({ text, expected, actual: formatBytes(small) });
      }
    }
    expect(mismatches).toEqual([]);
  });

  it("honours the precision argument as the reference does", () => {
    for (const [text, precision, expected] of python.format_bytes_precision) {
      expect(formatBytes(BigInt(text), precision)).toBe(expected);
    }
  });

  it("prints bytes below 1 KiB with two decimals and zero as '0 B'", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(0n)).toBe("0 B");
    expect(formatBytes(512)).toBe("512.00 B");
    expect(formatBytes(1536)).toBe("1.50 KB");
    expect(formatBytes(1152)).toBe("1.12 KB");
    expect(formatBytes(17_179_869_184)).toBe("16.00 GB");
    expect(formatBytes(2 ** 60)).toBe("1024.00 PB");
  });

  it("keeps the sign of a negative count without scaling it, like the reference", () => {
    expect(formatBytes(-2048)).toBe("-2048.00 B");
    expect(`-${formatBytes(2048)}`).toBe("-2.00 KB");
  });
});

describe("isoTimestampNs", () => {
  it("writes all nine fraction digits, before 1970 too", () => {
    expect(isoTimestampNs(1_764_999_312_105_815_000n)).toBe("2025-12-06T05:35:12.105815000Z");
    expect(isoTimestampNs(-1n)).toBe("1969-12-31T23:59:59.999999999Z");
    expect(isoTimestampNs(253_402_300_800n * 1_000_000_000n + 5n)).toBe("+010000-01-01T00:00:00.000000005Z");
  });

  it("gives the nanoseconds themselves beyond what a date can show, instead of throwing", () => {
    const limit = 8_640_000_000_000n * 1_000_000_000n;
    expect(isoTimestampNs(limit)).toBe("+275760-09-13T00:00:00.000000000Z");
    expect(isoTimestampNs(limit + 1_000_000_000n)).toBe(`${limit + 1_000_000_000n} ns`);
    expect(isoTimestampNs(10n ** 22n)).toBe("10000000000000000000000 ns");
    expect(isoTimestampNs(-limit - 1n)).toBe(`${-limit - 1n} ns`);
  });
});
