import { describe, expect, it } from "vitest";
import {
  CASEFOLD_SAMPLE,
  isPythonBlank,
  isSampleEventType,
  pythonStrip,
  STRIP_LOWER_SAMPLE,
  sampleRules,
} from "../../src/text/python-text.js";

describe("the reference's string rules", () => {
  it("strips what Python's str.strip() strips, not what JS trim() does", () => {
    expect(pythonStrip("\u001c\u0085 x \u3000")).toBe("x");
    // U+FEFF is space to JS, not to Python.
    expect(pythonStrip("\ufeffx")).toBe("\ufeffx");
    expect(isPythonBlank(" \t\u2028")).toBe(true);
    expect(isPythonBlank("\ufeff")).toBe(false);
  });

  it.each([
    ["sample", CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE],
    ["Sample", CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE],
    ["SAMPLE", CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE],
    [" Sample ", STRIP_LOWER_SAMPLE],
    ["\u0085sample\u001f", STRIP_LOWER_SAMPLE],
    ["\u017fample", CASEFOLD_SAMPLE],
    ["\ufeffsample", 0],
    ["samples", 0],
    ["phase_enter", 0],
    ["", 0],
  ])("tells %j by rule (bits %d)", (eventType, bits) => {
    expect(sampleRules(eventType)).toBe(bits);
    expect(isSampleEventType(eventType, "casefold")).toBe((bits & CASEFOLD_SAMPLE) !== 0);
    expect(isSampleEventType(eventType, "strip-lower")).toBe((bits & STRIP_LOWER_SAMPLE) !== 0);
  });
});
