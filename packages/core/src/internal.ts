/**
 * @stormlog/core/internal: for Stormlog's own packages; no semver promise. Helpers that sink, phases,
 * tracker, analysis and the CLI share so that they read and print exactly what the Python reference
 * does. Users import `@stormlog/core`.
 */

// Lossless JSON building blocks: the parser the sink's readers extend, float marks, Python escaping.

export { jsonValueProblem } from "./codec/json.js";
export {
  FLOAT_KEYS,
  LosslessJsonParser,
  linesAt,
  markFloat,
  type NumberToken,
  pythonJsonString,
  setJsonMember,
} from "./codec/json-codec.js";

// The canonical v3 line's layout (keys, order, value forms): what the encoder and the fast readers follow.

export {
  CANONICAL_END,
  CANONICAL_PREFIX,
  CANONICAL_V3_FIELDS,
  type CanonicalField,
  type CanonicalValueForm,
} from "./codec/canonical-line.js";

// JSONL lines, and the streaming encoder the sink writes with.

export {
  isCutShortLine,
  type JsonlLine,
  LineEndFinder,
  lineTooLong,
  MAX_LINE_BYTES,
  readJsonlLines,
  utf8FileText,
  utf8LineText,
  utf8TailText,
} from "./codec/jsonl.js";
export { TelemetryLineEncoder } from "./codec/line-encoder.js";

// Session summaries as the writers and readers build, update and store them.

export {
  type CreateSessionSummaryOptions,
  createSessionSummary,
  finalizeSessionSummary,
  inferSessionSummaryFromEvents,
  type SessionEventLike,
  type SessionSummaryUpdate,
  sessionEventLikeOf,
  sessionSummaryFromJson,
  sessionSummaryToJson,
  stableLegacySessionId,
  updateSessionSummary,
} from "./schema/session.js";

// The reference's text rules: Python's str()/format and strip, and what counts as a sample.

export { type PythonScalar, pythonFloatRepr, pythonFormatFixed, pythonStr } from "./text/pyrepr.js";
export {
  CASEFOLD_SAMPLE,
  isPythonBlank,
  isSampleEventType,
  pythonStrip,
  SAMPLE_EVENT_TYPE,
  SAMPLE_RULE_BITS,
  type SampleRule,
  STRIP_LOWER_SAMPLE,
  sampleRules,
} from "./text/python-text.js";

// Text printed from input: one escaped line; error messages that quote it; timestamps. A text
// starting with a byte order mark, and JSON nested too deep: `JsonlDecodeError`s (public) of their own
// names, which say what to do.

export { ByteOrderMarkError, inputText, JsonTooDeepError } from "./runtime/errors.js";
export { isoTimestampNs } from "./text/format.js";
export { type TerminalTextOptions, terminalText } from "./text/terminal-text.js";

// Logging that never throws into the caller, and Node built-ins loaded once, lazily.

export { nodeCrypto, nodeWorkerThreads } from "./runtime/builtins.js";
export { guardedLogger, type StormlogLogger } from "./runtime/logger.js";
export { openRegularFileSync, REGULAR_OPEN_FLAGS, refuseUnlessRegular } from "./runtime/regular-file.js";

// Worker threads started from an entry beside the calling module (built, bundled, or from source).

export { startWorkerBeside } from "./runtime/worker-entry.js";

// Memory counters past 2^53, kept exactly beside the decoded record for the analyses.

export {
  counterText,
  counterValue,
  type ExactCounterField,
  type ExactCounters,
  exactCountersOf,
  exactQuotient,
  setExactCounters,
} from "./schema/exact-counters.js";

// Small comparisons the encoders and collectors share.

export { sameStrings } from "./runtime/arrays.js";
