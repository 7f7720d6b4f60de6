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

// C0, DEL, C1; bidi controls and invisible characters (Trojan Source); line/paragraph separators;
// lone surrogates.
const UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  /[\u0000-\u001f\u007f-\u009f\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb\ud800-\udfff]/;

const SHORT: Readonly<Record<number, string>> = { 10: "\\n", 13: "\\r", 9: "\\t" };

function escapeCodePoint(code: number): string {
  const short = SHORT[code];
  if (short !== undefined) return short;
  if (code <= 0xff) return `\\x${code.toString(16).padStart(2, "0")}`;
  return `\\u${code.toString(16).padStart(4, "0")}`;
}

function isUnsafeCodePoint(code: number): boolean {
  return (
    code <= 0x1f ||
    (code >= 0x7f && code <= 0x9f) ||
    code === 0x061c ||
    code === 0x180e ||
    (code >= 0x200b && code <= 0x200f) ||
    (code >= 0x2028 && code <= 0x202e) ||
    (code >= 0x2060 && code <= 0x2069) ||
    code === 0xfeff ||
    (code >= 0xfff9 && code <= 0xfffb) ||
    (code >= 0xd800 && code <= 0xdfff)
  );
}

/**
 * `value` as one line that a terminal prints and never obeys: control characters (C0, DEL, C1),
 * bidi and zero-width characters are shown as escapes (`\x1b`, `\n`, `\u202e`), and text longer
 * than `maxLength` is cut with `…(+N chars)` (N counts the characters left out).
 */
export function terminalText(value: string, options: TerminalTextOptions = {}): string {
  const maxLength = options.maxLength ?? TERMINAL_TEXT_MAX_LENGTH;
  if (value.length <= maxLength && !UNSAFE.test(value)) return value;
  let out = "";
  let consumed = 0;
  for (const char of value) {
    const code = char.codePointAt(0)!;
    // A lone surrogate is one code unit; a pair is a printable astral character.
    const printed = char.length === 1 && isUnsafeCodePoint(code) ? escapeCodePoint(code) : char;
    if (out.length + printed.length > maxLength) {
      return `${out}…(+${[...value.slice(consumed)].length} chars)`;
    }
    out += printed;
    consumed += char.length;
  }
  return out;
}
