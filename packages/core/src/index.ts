/**
 * @stormlog/core: the telemetry schema (v2/v3/v4) shared with the Python Stormlog, its validation,
 * the lossless JSONL codec and the versioned collector contract every adapter implements.
 * Depends on nothing else of Stormlog's.
 */
export * from "./builtins.js";
export * from "./clock.js";
export * from "./codec.js";
export * from "./collector.js";
export * from "./errors.js";
export * from "./format.js";
export * from "./identity.js";
export type * from "./json.js";
export * from "./json-codec.js";
export * from "./jsonl.js";
export * from "./legacy.js";
export * from "./line-encoder.js";
export * from "./logger.js";
export type * from "./phase-host.js";
export * from "./pyrepr.js";
export * from "./python-text.js";
export * from "./schema.js";
export * from "./session.js";
export * from "./terminal-text.js";
export * from "./validate.js";
