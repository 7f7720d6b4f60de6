// Internal (not exported from the package): shared by the two phase_scope templates.
import type { JsonObject } from "./json.js";
import { FLOAT_KEYS } from "./json-codec.js";

/**
 * Whether `scope` has exactly the shape the phase recorder writes (the nine keys, plus `attributes`
 * when given, with their types): the one condition under which the phase_scope templates (core's
 * `encodeTelemetryRecord` and the line encoder) may write it. Anything else goes through the generic writer.
 */
export function isRecorderPhaseScope(scope: JsonObject): boolean {
  const { action, attributes, depth, name, parent_scope_id: parent, path, scope_id: scopeId } = scope;
  const { sequence, thread_id: threadId, thread_name: threadName } = scope;
  let keys = 0;
  for (const _ in scope) keys++;
  if (keys !== (attributes === undefined ? 9 : 10)) return false;
  if (typeof action !== "string" || typeof name !== "string" || typeof scopeId !== "string") return false;
  if (typeof threadName !== "string" || (parent !== null && typeof parent !== "string")) return false;
  if (!Number.isSafeInteger(depth) || !Number.isSafeInteger(sequence) || !Number.isSafeInteger(threadId))
    return false;
  if (!Array.isArray(path) || (scope as { [FLOAT_KEYS]?: unknown })[FLOAT_KEYS] !== undefined) return false;
  for (let i = 0; i < path.length; i++) if (typeof path[i] !== "string") return false;
  return true;
}
