/**
 * One process-wide set of "close me before the process goes" hooks, shared by every copy of
 * Stormlog loaded in the process (it lives on `process` under a `Symbol.for` key), so that several
 * sinks and the tracker install one listener per event and agree on re-raising a signal.
 */

/** Something that must be closed when the process is interrupted or exits. */
export interface ExitParticipant {
  /** SIGINT/SIGTERM: close asynchronously (the signal is re-raised afterwards). Must not reject. */
  onSignal(signal: NodeJS.Signals): Promise<void>;
  /** The event loop ran dry: close asynchronously. Must not reject, and must do no I/O when idle. */
  onBeforeExit(exitCode: number): Promise<void>;
  /** `process.exit()` or the end of the process: close synchronously. Must not throw. */
  onExit(exitCode: number): void;
}

const HANDLED_SIGNALS = ["SIGINT", "SIGTERM"] as const;
/** How long closing may take before a signal is re-raised anyway. */
const SIGNAL_CLOSE_TIMEOUT_MS = 5_000;

interface Registry {
  readonly participants: Set<ExitParticipant>;
  installed: boolean;
  signalInFlight: boolean;
  onSignal: (signal: NodeJS.Signals) => void;
  onBeforeExit: (code: number) => void;
  onExit: (code: number) => void;
}

const REGISTRY_KEY = Symbol.for("stormlog.exit-hooks.v1");

function uninstall(registry: Registry): void {
  if (!registry.installed) return;
  registry.installed = false;
  for (const signal of HANDLED_SIGNALS) process.removeListener(signal, registry.onSignal);
  process.removeListener("beforeExit", registry.onBeforeExit);
  process.removeListener("exit", registry.onExit);
}

function install(registry: Registry): void {
  if (registry.installed) return;
  registry.installed = true;
  for (const signal of HANDLED_SIGNALS) process.on(signal, registry.onSignal);
  process.on("beforeExit", registry.onBeforeExit);
  process.on("exit", registry.onExit);
}

/** Re-raises a signal with its default action, unless a listener other than ours handles it. */
function reraise(registry: Registry, signal: NodeJS.Signals): void {
  uninstall(registry);
  if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  else if (registry.participants.size > 0) install(registry);
}

function createRegistry(): Registry {
  const registry: Registry = {
    participants: new Set(),
    installed: false,
    signalInFlight: false,
    onSignal: (signal) => {
      // A second Ctrl+C while closing: stop waiting.
      if (registry.signalInFlight) return reraise(registry, signal);
      registry.signalInFlight = true;
      const closing = Promise.allSettled(
        [...registry.participants].map((participant) => participant.onSignal(signal)),
      );
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, SIGNAL_CLOSE_TIMEOUT_MS);
      });
      void Promise.race([closing, timeout]).then(() => {
        clearTimeout(timer);
        registry.signalInFlight = false;
        reraise(registry, signal);
      });
    },
    onBeforeExit: (code) => {
      for (const participant of [...registry.participants]) void participant.onBeforeExit(code);
    },
    onExit: (code) => {
      for (const participant of [...registry.participants]) {
        try {
          participant.onExit(code);
        } catch {
          // An exit hook must never turn a clean exit into a crash.
        }
      }
    },
  };
  return registry;
}

function registry(): Registry {
  const holder = process as unknown as Record<symbol, Registry | undefined>;
  let found = holder[REGISTRY_KEY];
  if (found === undefined) {
    found = createRegistry();
    holder[REGISTRY_KEY] = found;
  }
  return found;
}

/**
 * Registers a participant; the process listeners exist only while at least one is registered (so
 * Ctrl+C keeps its default behaviour when nothing is open). Returns the function that unregisters it.
 */
export function registerExitParticipant(participant: ExitParticipant): () => void {
  const shared = registry();
  shared.participants.add(participant);
  install(shared);
  return () => {
    shared.participants.delete(participant);
    if (shared.participants.size === 0 && !shared.signalInFlight) uninstall(shared);
  };
}

/** How many participants are registered (for tests and diagnostics). */
export function exitParticipantCount(): number {
  return registry().participants.size;
}
