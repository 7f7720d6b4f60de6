import { describe, expect, it } from "vitest";
import { formatBytes } from "../../src/text/format.js";
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
