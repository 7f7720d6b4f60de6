import type { MemoryCollector } from "@stormlog/core";
import { processCollector } from "../collectors/process-collector.js";
import { describeError } from "../describe-error.js";
import type { TrackerLogger } from "../options/tracker-options.js";
import { type CollectorState, DeviceGroup, groupByDevice } from "./device-group.js";

/**
 * The collectors a session reads, chosen at each start: the available ones (else the process
 * collector), grouped by device, with the primary device (the first) and those of its collectors read
 * at phase boundaries.
 */
export class CollectorSet {
  /** The device groups, in the order each device first appears. */
  groups: DeviceGroup[] = [];
  /** Every collector's state, `index` being its position here. */
  states: CollectorState[] = [];
  /** The first device: what phase records, `start`/`stop` and the top-level statistics describe. */
  primary: DeviceGroup = new DeviceGroup(-1, []);
  /** Primary-device collectors with `readSync()`, read at every phase boundary. */
  boundaryStates: CollectorState[] = [];
  /** Primary-device collectors read only at the boundaries of phases that ask (`readOnDemand()`). */
  onDemandStates: CollectorState[] = [];
  /**
   * Primary-device collectors that see between readings (`takeHighWater()`: tfjs's engine count,
   * NVML polled on its thread): their windows end at every record of the primary device, phase
   * boundaries included, so a peak falls in the phase it happened in.
   */
  highWaterStates: CollectorState[] = [];
  /** The process collector this set made (without collectors given, or as their fallback). */
  private owned: ReturnType<typeof processCollector> | null = null;

  constructor(
    /** The collectors given; undefined: the process collector. */
    private readonly given: readonly MemoryCollector[] | undefined,
    private readonly withMemoryCapabilities: boolean,
    private readonly boundaryReadings: boolean,
    private readonly logger: TrackerLogger,
  ) {}

  /** Checks availability and groups what can be read, for a new session. */
  prepare(): void {
    let collectors = this.given;
    if (collectors === undefined) {
      if (this.owned === null || this.owned.availability().available === false) {
        this.owned = processCollector();
      }
      collectors = [this.owned];
    }
    const available: MemoryCollector[] = [];
    for (const collector of collectors) {
      let availability: ReturnType<MemoryCollector["availability"]>;
      try {
        availability = collector.availability();
      } catch (error) {
        availability = { available: false, reason: describeError(error) };
      }
      if (availability.available) available.push(collector);
      else
        this.logger.warn(
          `collector ${collector.name} is not available and will not be read: ${availability.reason}`,
        );
    }
    if (available.length === 0 && this.given !== undefined) {
      // No configured collector can read here (no NVML on a CPU machine, say): host memory is still
      // worth recording, and the run still gets a timeline.
      this.owned ??= processCollector();
      this.logger.warn("no configured collector is available; falling back to the process collector (RSS)");
      available.push(this.owned);
    }
    this.groups = groupByDevice(available, this.withMemoryCapabilities);
    this.states = this.groups.flatMap((group) => group.states);
    this.states.forEach((state, index) => {
      state.index = index;
    });
    this.primary = this.groups[0] ?? new DeviceGroup(-1, [], this.withMemoryCapabilities);
    const owning = this.boundaryReadings ? this.primary.states.filter((state) => state.owned.length > 0) : [];
    this.boundaryStates = owning.filter((state) => typeof state.collector.readSync === "function");
    this.highWaterStates = owning.filter((state) => typeof state.collector.takeHighWater === "function");
    this.onDemandStates = owning.filter(
      (state) =>
        typeof state.collector.readSync !== "function" && typeof state.collector.readOnDemand === "function",
    );
  }

  /** Releases the process collector this set made, if any (at the end of a session). */
  closeOwned(): void {
    this.owned?.close();
  }
}
