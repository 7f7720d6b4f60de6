/**
 * Text read from telemetry (phase names, `job_id`, `host`, `context`, file names) printed for a
 * person: a record may hold anything, and a terminal obeys escape sequences (window titles, screen
 * clears, hyperlinks, C1 controls). Every command that prints input-derived text goes through
 * `terminalText`.
 */

/** Options of `terminalText`. */
export interface TerminalTextOptions {
  /** Characters kept at most (escapes counted as printed); the rest is cut with `…(+N chars)`. Default 200. */
  readonly maxLength?: number;
}

/** Default `maxLength` of `terminalText`. */
export const TERMINAL_TEXT_MAX_LENGTH = 200;

// Controls (C0, DEL, C1), format characters (bidi controls, zero-width and invisible characters,
// tags: Trojan Source, look-alike ids), private use, lone surrogates, line/paragraph separators,
// noncharacters, and the Hangul fillers that print as blanks.
const UNSAFE = /[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}\u115f\u1160\u3164\uffa0\ufdd0-\ufdef\ufffe\uffff]/u;
const UNSAFE_CHAR = new RegExp(`^${UNSAFE.source}$`, "u");

const SHORT: Readonly<Record<number, string>> = { 10: "\\n", 13: "\\r", 9: "\\t" };

function escapeCodePoint(code: number): string {
  const short = SHORT[code];
  if (short !== undefined) return short;
  if (code <= 0xff) return `\\x${code.toString(16).padStart(2, "0")}`;
  if (code <= 0xffff) return `\\u${code.toString(16).padStart(4, "0")}`;
  return `\\u{${code.toString(16)}}`;
}

/**
 * `value` as one line that a terminal prints and never obeys: control characters (C0, DEL, C1),
 * bidi, zero-width, invisible and private-use characters are shown as escapes (`\x1b`, `\n`,
 * `\u202e`, `\u{e0041}`), and text longer
 * than `maxLength` is cut with `…(+N chars)` (N counts the characters left out).
 */
export function terminalText(value: string, options: TerminalTextOptions = {}): string {
  const maxLength = options.maxLength ?? TERMINAL_TEXT_MAX_LENGTH;
  if (value.length <= maxLength && !UNSAFE.test(value)) return value;
  let out = "";
  let consumed = 0;
  for (const char of value) {
    const code = char.codePointAt(0)!;
    const printed = UNSAFE_CHAR.test(char) ? escapeCodePoint(code) : char;
    if (out.length + printed.length > maxLength) {
      return `${out}…(+${[...value.slice(consumed)].length} chars)`;
    }
    out += printed;
    consumed += char.length;
  }
  return out;
}
