/** An error's message (or the thrown value as a string), for the tracker's warnings and records. */
export function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
