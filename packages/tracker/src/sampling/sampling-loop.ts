import type { Clock, Scheduler, TimerHandle } from "@stormlog/core";

/** What the sampling loop reads at each tick. */
export interface SampleReader {
  /** Reads every collector once: the results, or a promise of them when some answer later. */
  read(): unknown[] | Promise<unknown[]>;
}

/** What the sampling loop hands each tick's results to. */
export interface SampleSink {
  /** Records one read's results (not called for a read that outlived its session). */
  process(results: readonly unknown[]): void;
  /** A read or its processing threw while the loop was running. */
  failed(error: unknown): void;
}

/**
 * The sampling loop: one tick every `intervalMs` on the (injectable, unref'd) scheduler, measured
 * from when the last one began; a tick that finds a read still in flight (an asynchronous collector,
 * or `sampleNow()`) is skipped rather than overlapping it, and one that throws backs off a second.
 * Each `start()`/`stop()` begins a new generation, so a read that outlives its session is dropped.
 */
export class SamplingLoop {
  private running = false;
  private generation = 0;
  private timer: TimerHandle | null = null;
  /** The asynchronous read in progress, if any. */
  private busy: Promise<void> | null = null;
  private readonly onTimerTask = (): void => this.onTimer();

  constructor(
    private readonly clock: Clock,
    private readonly scheduler: Scheduler,
    private readonly intervalMs: number,
    private readonly reader: SampleReader,
    private readonly sink: SampleSink,
  ) {}

  /** Starts ticking: the first tick an interval from now. */
  start(): void {
    this.running = true;
    this.generation++;
    this.schedule(this.intervalMs);
  }

  /** Stops ticking; a read still in flight is discarded. */
  stop(): void {
    this.running = false;
    this.generation++;
    if (this.timer !== null) {
      this.scheduler.clearTimeout(this.timer);
      this.timer = null;
    }
    this.busy = null;
  }

  /** Reads now, as a tick would (after a read still in flight, if any); resolves once processed. */
  async sampleNow(): Promise<void> {
    while (this.busy !== null) await this.busy;
    if (!this.running) return;
    let pending: Promise<void> | undefined;
    try {
      pending = this.iteration();
    } catch (error) {
      this.failed(error);
      return;
    }
    if (pending === undefined) return;
    const done = pending.then(
      () => {
        this.busy = null;
      },
      (error: unknown) => {
        this.busy = null;
        this.failed(error);
      },
    );
    this.busy = done;
    await done;
  }

  private schedule(delayMs: number): void {
    this.timer = this.scheduler.setTimeout(this.onTimerTask, delayMs);
  }

  private onTimer(): void {
    this.timer = null;
    if (!this.running) return;
    const generation = this.generation;
    const startedNs = this.clock.nowNs();
    // A `sampleNow()` still reading: this tick is skipped rather than overlapping it.
    if (this.busy !== null) {
      this.scheduleNext(generation, startedNs, 0);
      return;
    }
    let pending: Promise<void> | undefined;
    try {
      pending = this.iteration();
    } catch (error) {
      this.failed(error);
      this.scheduleNext(generation, startedNs, 1_000);
      return;
    }
    if (pending === undefined) {
      this.scheduleNext(generation, startedNs, 0);
      return;
    }
    this.busy = pending.then(
      () => {
        this.busy = null;
        this.scheduleNext(generation, startedNs, 0);
      },
      (error: unknown) => {
        this.busy = null;
        this.failed(error);
        this.scheduleNext(generation, startedNs, 1_000);
      },
    );
  }

  /**
   * The next tick, an interval after this one began (at least `backoffMs` from now). A method, not
   * a closure made per tick: a tick runs ten times a second inside training.
   */
  private scheduleNext(generation: number, startedNs: bigint, backoffMs: number): void {
    if (!this.running || generation !== this.generation || this.timer !== null) return;
    const elapsedMs = Number(this.clock.nowNs() - startedNs) / 1e6;
    this.schedule(Math.max(backoffMs, this.intervalMs - elapsedMs, 0));
  }

  /** One read and its processing: undefined when done at once, else a promise. */
  private iteration(): Promise<void> | undefined {
    const generation = this.generation;
    const results = this.reader.read();
    if (!(results instanceof Promise)) {
      this.sink.process(results);
      return undefined;
    }
    return results.then((settled) => {
      if (this.running && generation === this.generation) this.sink.process(settled);
    });
  }

  private failed(error: unknown): void {
    if (this.running) this.sink.failed(error);
  }
}
