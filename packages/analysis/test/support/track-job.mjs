// A two-rank training job tracked by the real MemoryTracker, one sink directory per rank under
// STORMLOG_JOB_ROOT; prints the session ids by rank. Run by tracked-job.ts in the tracker's own package.
import { COLLECTOR_SPECIFICATION_VERSION, noCapabilities } from "@stormlog/core";
import { MemoryTracker } from "@stormlog/tracker";

const MiB = 2 ** 20;
const DEVICE_TOTAL = 1024 * MiB;
const STEPS = 40;

/** Time moved by hand; timers are never due, so the tracker samples only when told to. */
class ManualTime {
  ns = BigInt(process.env.STORMLOG_JOB_START_NS);
  nowNs() {
    return this.ns;
  }
  advanceMs(ms) {
    this.ns += BigInt(ms) * 1_000_000n;
  }
  setTimeout() {
    return 0;
  }
  clearTimeout() {}
}

/**
 * Counters the job drives: the allocator reserves twice what it holds and the device adds `hidden`;
 * `live` is the tfjs adapter's birth-phase count of the next sample; `partial` makes it miss device used.
 */
function collector(counters) {
  const reading = () => ({
    allocator_allocated_bytes: counters.allocated,
    allocator_reserved_bytes: 2 * counters.allocated,
    device_used_bytes: 2 * counters.allocated + counters.hidden,
    device_total_bytes: DEVICE_TOTAL,
  });
  return {
    specificationVersion: COLLECTOR_SPECIFICATION_VERSION,
    name: "stormlog.test_tracker",
    deviceId: 0,
    capabilities: {
      ...noCapabilities("tensorflow", "stormlog.test_tracker", "test.counters"),
      supports_allocator_allocated: true,
      supports_allocator_reserved: true,
      supports_device_used: true,
      supports_device_total: true,
    },
    availability: () => ({ available: true }),
    sample: () => {
      if (!counters.partial) {
        const metadata = { tfjs_num_tensors: counters.tensors, tfjs_live_by_phase: counters.live };
        return { kind: "full", reading: reading(), metadata };
      }
      const { device_used_bytes: _missing, ...rest } = reading();
      return {
        kind: "partial",
        reading: rest,
        missing: ["device_used_bytes"],
        reason: "device counter busy",
      };
    },
    readSync: () => ({ kind: "full", reading: reading(), metadata: { tfjs_num_tensors: counters.tensors } }),
  };
}

/**
 * One rank: `train > forward, backward` steps where backward keeps 1 MiB and a tensor that stays alive,
 * a collector that degrades then recovers, hidden device memory that drifts up (rank 1) or spikes once
 * with an OOM (rank 0), and the tracker's leak alerts at stop().
 */
async function trackRank(rank, dir) {
  const time = new ManualTime();
  const counters = { allocated: 256 * MiB, hidden: 64 * MiB, tensors: 100, live: {}, partial: false };
  const tracker = new MemoryTracker({
    collectors: [collector(counters)],
    identity: { jobId: "schema-job", rank, localRank: rank, worldSize: 2 },
    sink: { rootDir: dir, handleProcessExit: false },
    sinkThread: "main",
    clock: time,
    scheduler: time,
    env: false,
    handleProcessExit: false,
    registerGlobal: false,
    initialSample: false,
    alerts: false,
    leakAlerts: { intervalMs: 3_600_000 },
    hostname: `node-${rank}`,
    pid: 1000 + rank,
    logger: { warn: () => undefined },
  });
  await tracker.start();
  const sessionId = tracker.getSessionSummary()?.session_id;
  for (let step = 0; step < STEPS; step++) {
    const spike = rank === 0 && step === STEPS / 2;
    counters.hidden = rank === 1 ? 64 * MiB + step * 3 * MiB : spike ? 400 * MiB : 64 * MiB;
    counters.partial = step === 10;
    counters.live = {
      "train / forward": { tensors: 2, bytes: 8192, largest: [] },
      "train / backward": {
        tensors: step,
        bytes: step * 4 * MiB,
        largest:
          step === 0 ? [] : [{ dtype: "float32", shape: [1024, 1024], bytes: step * 4 * MiB, count: step }],
      },
    };
    await tracker.sampleNow();
    if (spike) tracker.handleError(new Error("CUDA out of memory. Tried to allocate 2.00 GiB"));
    tracker.phase("train", () => {
      time.advanceMs(1);
      tracker.phase("forward", () => {
        counters.allocated += 8 * MiB;
        time.advanceMs(2);
        counters.allocated -= 8 * MiB;
      });
      tracker.phase("backward", () => {
        counters.allocated += 4 * MiB;
        counters.tensors += 1;
        time.advanceMs(2);
        counters.allocated -= 3 * MiB;
      });
      time.advanceMs(1);
    });
    time.advanceMs(5);
  }
  await tracker.stop();
  return sessionId;
}

const root = process.env.STORMLOG_JOB_ROOT;
const sessionIds = [];
for (const rank of [0, 1]) sessionIds.push(await trackRank(rank, `${root}/rank-${rank}`));
console.log(JSON.stringify({ sessionIds }));
