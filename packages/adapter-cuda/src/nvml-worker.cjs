// The NVML sampling thread. It blocks in Atomics.wait on a shared "doorbell"; the main thread
// fills a request slot (device UUID, what to read), rings, and awaits the slot's response counter
// with Atomics.waitAsync. NVML calls (which can stall on the driver lock) never run on the main
// thread. Between requests it polls the devices of slots that ask (POLL_MS) and keeps their highest
// used memory, so a peak inside a synchronous step is seen. Layout constants are mirrored in
// nvml-library.ts.
"use strict";

const { workerData } = require("node:worker_threads");
// An optional peer, but installed: the main thread loaded it before starting this worker.
const koffi = require("koffi");
const { openNvml, NVML_SUCCESS } = require("./nvml-binding.cjs");

const { buffer, libraryPath, headerInts, maxSlots, slotInts, slotDoubles, uuidBytes, peakInts } = workerData;
// Header: [doorbell, shutdown, ready, unused]. The control block is padded to 8 bytes.
const controlBytes = Math.ceil(((headerInts + maxSlots * slotInts) * 4) / 8) * 8;
const control = new Int32Array(buffer, 0, controlBytes / 4);
const results = new Float64Array(buffer, controlBytes, maxSlots * slotDoubles);
const uuids = new Uint8Array(buffer, controlBytes + results.byteLength, maxSlots * uuidBytes);
const peaks = new BigInt64Array(
  buffer,
  controlBytes + results.byteLength + uuids.byteLength,
  maxSlots * peakInts,
);
const READY = 2;

// Slot ints: [request, response, kind (1 memory, 2 memory + processes), registered, pid, poll ms, takes]
const REQUEST = 0;
const RESPONSE = 1;
const KIND = 2;
const KIND_PROCESSES = 2;
const REGISTERED = 3;
const PID = 4;
const POLL_MS = 5;
const TAKES = 6;
/** Polling pauses when nobody took a slot's peak for this long (a stopped tracker), until one does. */
const IDLE_MS = 5000;
/** How often a paused slot is looked at again for takes. */
const IDLE_CHECK_MS = 250;
// Slot doubles: [status, memoryRet, version, total, free, used, reserved, processRet, count, own, all]
const STATUS_OK = 0;
const STATUS_NO_DEVICE = 1;
const STATUS_LOAD_FAILED = 2;

let nvml;
let loadError = "";
try {
  nvml = openNvml(koffi, libraryPath);
  const ret = nvml.init();
  if (ret !== NVML_SUCCESS) loadError = `nvmlInit failed with ${ret}`;
} catch (error) {
  loadError = error instanceof Error ? error.message : String(error);
}

const handles = new Map();
const scratch = new Float64Array(5);
const processScratch = new Float64Array(3);

function uuidOf(slot) {
  const start = slot * uuidBytes;
  let end = start;
  while (end < start + uuidBytes && uuids[end] !== 0) end += 1;
  return Buffer.from(uuids.buffer, uuids.byteOffset + start, end - start).toString("utf8");
}

/** The slot's device handle (cached per UUID), or the NVML return code that refused it. */
function handleOf(slot) {
  const uuid = uuidOf(slot);
  let cached = handles.get(slot);
  if (!cached || cached.uuid !== uuid) {
    const found = nvml.handleByUuid(uuid);
    if (found.ret !== NVML_SUCCESS) return found.ret;
    cached = { uuid, handle: found.handle };
    handles.set(slot, cached);
  }
  return cached;
}

function service(slot) {
  const out = slot * slotDoubles;
  results.fill(Number.NaN, out, out + slotDoubles);
  if (loadError !== "") {
    results[out] = STATUS_LOAD_FAILED;
    return;
  }
  const cached = handleOf(slot);
  if (typeof cached === "number") {
    results[out] = STATUS_NO_DEVICE;
    results[out + 1] = cached;
    return;
  }
  results[out] = STATUS_OK;
  const ret = nvml.memory(cached.handle, scratch);
  results[out + 1] = ret;
  if (ret === NVML_SUCCESS) results.set(scratch, out + 2);
  const base = headerInts + slot * slotInts;
  if (control[base + KIND] === KIND_PROCESSES) {
    const processRet = nvml.processes(cached.handle, control[base + PID], processScratch);
    results[out + 7] = processRet;
    if (processRet === NVML_SUCCESS) results.set(processScratch, out + 8);
  }
}

/** One memory query per polling slot whose time has come: its used memory into `peaks`. */
const nextPoll = new Float64Array(maxSlots);
const pollEvery = new Int32Array(maxSlots);
const lastTakes = new Int32Array(maxSlots);
const takesSeenAt = new Float64Array(maxSlots);
const pollScratch = new Float64Array(5);
function poll(now) {
  let wake = Number.POSITIVE_INFINITY;
  for (let slot = 0; slot < maxSlots; slot += 1) {
    const base = headerInts + slot * slotInts;
    const every = Atomics.load(control, base + POLL_MS);
    // A slot polled anew (registered again, another interval) starts at once.
    if (every !== pollEvery[slot]) {
      pollEvery[slot] = every;
      nextPoll[slot] = 0;
    }
    if (every <= 0 || Atomics.load(control, base + REGISTERED) !== 1) continue;
    const takes = Atomics.load(control, base + TAKES);
    if (takes !== lastTakes[slot] || takesSeenAt[slot] === 0) {
      lastTakes[slot] = takes;
      takesSeenAt[slot] = now;
    } else if (now - takesSeenAt[slot] > IDLE_MS) {
      // Paused: looked at again shortly, so a tracker that asks again is polled for soon.
      nextPoll[slot] = now + IDLE_CHECK_MS;
      wake = Math.min(wake, nextPoll[slot]);
      continue;
    }
    if (now >= nextPoll[slot]) {
      nextPoll[slot] = now + every;
      try {
        const cached = handleOf(slot);
        if (typeof cached !== "number" && nvml.memory(cached.handle, pollScratch) === NVML_SUCCESS) {
          const used = pollScratch[3];
          if (Number.isSafeInteger(used) && used >= 0) record(slot, BigInt(used));
        }
      } catch {
        // A failed poll is a poll missed; requests report NVML's errors.
      }
    }
    wake = Math.min(wake, nextPoll[slot]);
  }
  return wake;
}

/** The latest used memory, and the highest since the main thread's last take (it resets that one). */
function record(slot, used) {
  Atomics.store(peaks, slot * peakInts + 1, used);
  for (;;) {
    const highest = Atomics.load(peaks, slot * peakInts);
    if (highest >= used) return;
    if (Atomics.compareExchange(peaks, slot * peakInts, highest, used) === highest) return;
  }
}

Atomics.store(control, READY, 1);
let seen = 0;
let wake = Number.POSITIVE_INFINITY;
for (;;) {
  const timeout = wake === Number.POSITIVE_INFINITY ? undefined : Math.max(0, wake - performance.now());
  Atomics.wait(control, 0, seen, timeout);
  // Read the doorbell before scanning: a ring during the scan makes the next wait return at once.
  seen = Atomics.load(control, 0);
  if (Atomics.load(control, 1) !== 0) break;
  if (loadError === "") wake = poll(performance.now());
  for (let slot = 0; slot < maxSlots; slot += 1) {
    const base = headerInts + slot * slotInts;
    const request = Atomics.load(control, base + REQUEST);
    if (request === Atomics.load(control, base + RESPONSE)) continue;
    try {
      service(slot);
    } catch {
      results[slot * slotDoubles] = STATUS_LOAD_FAILED;
    }
    Atomics.store(control, base + RESPONSE, request);
    Atomics.notify(control, base + RESPONSE);
  }
}

if (nvml && loadError === "") nvml.shutdown();
