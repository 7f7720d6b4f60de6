/**
 * The Python reference's string rules, where analysis must read text exactly as it does: `str.isspace()`,
 * `str.strip()`, and the two ways its analyses tell a sample record apart.
 */

/** Python's `str.isspace()` characters beyond the ASCII controls and the U+2000 block. */
const PYTHON_SPACES = new Set([0x20, 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000]);

/** Whether UTF-16 code unit `code` is a character Python's `str.isspace()` accepts (JS `\s` differs: U+FEFF, U+001C-U+001F). */
export function isPythonSpace(code: number): boolean {
  return (
    (code >= 0x09 && code <= 0x0d) ||
    (code >= 0x1c && code <= 0x20) ||
    (code >= 0x2000 && code <= 0x200a) ||
    PYTHON_SPACES.has(code)
  );
}

/** Whether `value` is empty after Python's `str.strip()`. */
export function isPythonBlank(value: string): boolean {
  for (let i = 0; i < value.length; i++) if (!isPythonSpace(value.charCodeAt(i))) return false;
  return true;
}

/** Python's `str.strip()`. */
export function pythonStrip(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && isPythonSpace(value.charCodeAt(start))) start++;
  while (end > start && isPythonSpace(value.charCodeAt(end - 1))) end--;
  return start === 0 && end === value.length ? value : value.slice(start, end);
}

/** The event type of a memory reading, as the tracker writes it. */
export const SAMPLE_EVENT_TYPE = "sample";

/**
 * How the reference's analyses tell a sample: cross-rank (distributed) analysis by
 * `event_type.casefold() == "sample"`, hidden-memory gap analysis by
 * `str(event_type).strip().lower() == "sample"`. So `" Sample "` is a sample to gap analysis only,
 * and `"ſample"` (long s, which case-folds to "s") to cross-rank analysis only.
 */
export type SampleRule = "casefold" | "strip-lower";

/** Sample under the cross-rank rule (`SAMPLE_RULE_BITS`). */
export const CASEFOLD_SAMPLE = 1;
/** Sample under the gap rule. */
export const STRIP_LOWER_SAMPLE = 2;

/** The bit of each rule in `sampleRules`. */
export const SAMPLE_RULE_BITS: Readonly<Record<SampleRule, number>> = {
  casefold: CASEFOLD_SAMPLE,
  "strip-lower": STRIP_LOWER_SAMPLE,
};

/**
 * Which rules take `eventType` for a sample, as bits (`CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE` for
 * the exact `"sample"`, 0 for any other event).
 */
export function sampleRules(eventType: string): number {
  if (eventType === SAMPLE_EVENT_TYPE) return CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE;
  const length = eventType.length;
  if (length === SAMPLE_EVENT_TYPE.length) {
    // Of the characters Python case-folds into "sample", only U+017F (long s) does not lower-case to it as well.
    if (eventType.toLowerCase() === SAMPLE_EVENT_TYPE) return CASEFOLD_SAMPLE | STRIP_LOWER_SAMPLE;
    return eventType.replaceAll("\u017f", "s").toLowerCase() === SAMPLE_EVENT_TYPE ? CASEFOLD_SAMPLE : 0;
  }
  // Longer: a sample to the gap rule only with Python spaces around it (most event types leave here).
  if (length < SAMPLE_EVENT_TYPE.length) return 0;
  if (!isPythonSpace(eventType.charCodeAt(0)) && !isPythonSpace(eventType.charCodeAt(length - 1))) return 0;
  return pythonStrip(eventType).toLowerCase() === SAMPLE_EVENT_TYPE ? STRIP_LOWER_SAMPLE : 0;
}

/**
 * Whether the reference's analysis with `rule` takes `eventType` for a sample; without a rule, whether
 * either does (what Stormlog's own analyses and exports count as a sample).
 */
export function isSampleEventType(eventType: string, rule?: SampleRule): boolean {
  const rules = sampleRules(eventType);
  return rule === undefined ? rules !== 0 : (rules & SAMPLE_RULE_BITS[rule]) !== 0;
}
