/** What a Stormlog logger may have: `warn`, and optionally `info` and `debug`. */
export interface StormlogLogger {
  warn(message: string): void;
  info?(message: string): void;
  debug?(message: string): void;
}

const LOGGER_METHODS = ["warn", "info", "debug"] as const;

/**
 * `logger`'s `warn`, `info` and `debug` made safe to call from background work (a sampling tick, a sink
 * write): a user's logger that throws loses that message, never the caller's work, and never
 * surfaces as an uncaught exception in the training loop.
 */
export function guardedLogger<L extends StormlogLogger>(logger: L): L {
  const guarded: StormlogLogger = {
    warn: (message) => {
      try {
        logger.warn(message);
      } catch {
        // The logger's own failure has nowhere left to go.
      }
    },
  };
  for (const method of LOGGER_METHODS) {
    if (method === "warn" || typeof logger[method] !== "function") continue;
    guarded[method] = (message: string) => {
      try {
        logger[method]?.(message);
      } catch {
        // As above.
      }
    };
  }
  return guarded as L;
}
