import { describe, expect, it } from "vitest";
import { logicalIndexOf, parseCudaVisibleDevices, resolveLogicalDevice } from "../src/visible-devices.js";

const physical = [
  { index: 0, uuid: "GPU-aaaa1111-0000-0000-0000-000000000000" },
  { index: 1, uuid: "GPU-bbbb2222-0000-0000-0000-000000000000" },
  { index: 2, uuid: "GPU-bbbb3333-0000-0000-0000-000000000000" },
];

describe("parseCudaVisibleDevices", () => {
  it("is undefined when unset and empty for an empty string", () => {
    expect(parseCudaVisibleDevices(undefined)).toBeUndefined();
    expect(parseCudaVisibleDevices("")).toEqual([]);
  });

  it("reads indices, GPU- and MIG- UUIDs, with spaces", () => {
    expect(parseCudaVisibleDevices("2, 0,GPU-bbbb2222,MIG-1234-5678")).toEqual([
      { kind: "index", index: 2 },
      { kind: "index", index: 0 },
      { kind: "uuid", uuid: "GPU-bbbb2222" },
      { kind: "uuid", uuid: "MIG-1234-5678" },
    ]);
  });

  it("stops at the first invalid or repeated entry, as CUDA does", () => {
    expect(parseCudaVisibleDevices("1,-1,0")).toEqual([{ kind: "index", index: 1 }]);
    expect(parseCudaVisibleDevices("0,abc,1")).toEqual([{ kind: "index", index: 0 }]);
    expect(parseCudaVisibleDevices("1,1,0")).toEqual([{ kind: "index", index: 1 }]);
    expect(parseCudaVisibleDevices("NoDevFiles")).toEqual([]);
  });
});

describe("resolveLogicalDevice", () => {
  it("maps one to one when CUDA_VISIBLE_DEVICES is unset", () => {
    expect(resolveLogicalDevice(2, undefined, physical)).toEqual({
      ok: true,
      uuid: physical[2]!.uuid,
      physicalIndex: 2,
    });
    expect(resolveLogicalDevice(3, undefined, physical)).toMatchObject({ ok: false });
  });

  it("maps logical indices through indices and UUID prefixes", () => {
    const entries = parseCudaVisibleDevices("2,GPU-aaaa");
    expect(resolveLogicalDevice(0, entries, physical)).toMatchObject({ ok: true, physicalIndex: 2 });
    expect(resolveLogicalDevice(1, entries, physical)).toMatchObject({ ok: true, physicalIndex: 0 });
    expect(resolveLogicalDevice(2, entries, physical)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/makes 2 device\(s\) visible/),
    });
  });

  it("ignores entries from the first that names no device, and says why", () => {
    const entries = parseCudaVisibleDevices("1,7,0");
    expect(resolveLogicalDevice(0, entries, physical)).toMatchObject({ ok: true, physicalIndex: 1 });
    const beyond = resolveLogicalDevice(1, entries, physical);
    expect(beyond).toMatchObject({ ok: false, reason: expect.stringMatching(/device 7 does not exist/) });
    const ambiguous = resolveLogicalDevice(0, parseCudaVisibleDevices("GPU-bbbb"), physical);
    expect(ambiguous).toMatchObject({ ok: false, reason: expect.stringMatching(/prefix of 2 devices/) });
  });

  it("passes MIG UUIDs through, without a physical index", () => {
    expect(resolveLogicalDevice(0, parseCudaVisibleDevices("MIG-abcd"), physical)).toEqual({
      ok: true,
      uuid: "MIG-abcd",
      physicalIndex: undefined,
    });
  });
});

describe("logicalIndexOf", () => {
  it("finds the logical index of a UUID", () => {
    expect(logicalIndexOf(physical[1]!.uuid, undefined, physical)).toBe(1);
    expect(logicalIndexOf(physical[1]!.uuid, parseCudaVisibleDevices("2,1"), physical)).toBe(1);
    expect(logicalIndexOf(physical[0]!.uuid, parseCudaVisibleDevices("2,1"), physical)).toBeUndefined();
    expect(logicalIndexOf(physical[0]!.uuid.toUpperCase(), undefined, physical)).toBe(0);
  });
});
