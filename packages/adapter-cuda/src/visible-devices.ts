/** One entry of `CUDA_VISIBLE_DEVICES`: a physical index, or a GPU/MIG UUID (possibly a GPU UUID prefix). */
export type VisibleDeviceEntry =
  | { readonly kind: "index"; readonly index: number }
  | { readonly kind: "uuid"; readonly uuid: string };

/** A physical device as NVML enumerates it. */
export interface PhysicalDevice {
  readonly index: number;
  readonly uuid: string;
}

/** Where a logical (CUDA) device index points. */
export type ResolvedDevice =
  | { readonly ok: true; readonly uuid: string; readonly physicalIndex: number | undefined }
  | { readonly ok: false; readonly reason: string };

/**
 * Parses `CUDA_VISIBLE_DEVICES` as CUDA does: comma-separated indices or UUIDs (`GPU-...`, also
 * as a unique prefix, and `MIG-...`), read up to the first invalid or repeated entry.
 * Undefined (unset) means every device is visible in NVML order; an empty string means none.
 */
export function parseCudaVisibleDevices(value: string | undefined): VisibleDeviceEntry[] | undefined {
  if (value === undefined) return undefined;
  const entries: VisibleDeviceEntry[] = [];
  const seen = new Set<string>();
  for (const raw of value.split(",")) {
    const token = raw.trim();
    let entry: VisibleDeviceEntry;
    if (/^\d+$/.test(token)) entry = { kind: "index", index: Number(token) };
    else if (/^(GPU|MIG)-/i.test(token)) entry = { kind: "uuid", uuid: token };
    else break;
    const key = entry.kind === "index" ? `#${entry.index}` : entry.uuid.toLowerCase();
    if (seen.has(key)) break;
    seen.add(key);
    entries.push(entry);
  }
  return entries;
}

/**
 * Maps a logical CUDA device index to a physical device: through `entries` when
 * `CUDA_VISIBLE_DEVICES` is set, else one to one. Note CUDA numbers devices fastest-first unless
 * `CUDA_DEVICE_ORDER=PCI_BUS_ID`, while NVML uses PCI bus order: set that variable on multi-GPU
 * hosts with mixed models so both agree.
 */
export function resolveLogicalDevice(
  logical: number,
  entries: readonly VisibleDeviceEntry[] | undefined,
  physical: readonly PhysicalDevice[],
): ResolvedDevice {
  if (entries === undefined) {
    const device = physical[logical];
    return device
      ? { ok: true, uuid: device.uuid, physicalIndex: device.index }
      : { ok: false, reason: `device ${logical} does not exist (NVML sees ${physical.length})` };
  }
  // CUDA ignores everything from the first entry that names no device.
  const visible: ResolvedDevice[] = [];
  let stoppedBy = "";
  for (const entry of entries) {
    const resolved = resolveEntry(entry, physical);
    if (!resolved.ok) {
      stoppedBy = ` (${resolved.reason}, so CUDA ignores it and the rest)`;
      break;
    }
    visible.push(resolved);
  }
  const device = visible[logical];
  if (device) return device;
  return {
    ok: false,
    reason: `CUDA_VISIBLE_DEVICES makes ${visible.length} device(s) visible${stoppedBy}; logical device ${logical} is not one of them`,
  };
}

/** The logical index under which `uuid` is visible, or undefined. */
export function logicalIndexOf(
  uuid: string,
  entries: readonly VisibleDeviceEntry[] | undefined,
  physical: readonly PhysicalDevice[],
): number | undefined {
  if (entries === undefined) {
    const index = physical.findIndex((device) => sameUuid(device.uuid, uuid));
    return index >= 0 ? index : undefined;
  }
  for (let logical = 0; logical < entries.length; logical += 1) {
    const resolved = resolveEntry(entries[logical]!, physical);
    if (!resolved.ok) return undefined;
    if (sameUuid(resolved.uuid, uuid)) return logical;
  }
  return undefined;
}

function resolveEntry(entry: VisibleDeviceEntry, physical: readonly PhysicalDevice[]): ResolvedDevice {
  if (entry.kind === "index") {
    const device = physical.find((candidate) => candidate.index === entry.index);
    return device
      ? { ok: true, uuid: device.uuid, physicalIndex: device.index }
      : { ok: false, reason: `device ${entry.index} does not exist` };
  }
  if (/^MIG-/i.test(entry.uuid)) {
    // A MIG instance has no physical index of its own; NVML resolves its UUID directly.
    return { ok: true, uuid: entry.uuid, physicalIndex: undefined };
  }
  const matches = physical.filter((device) => device.uuid.toLowerCase().startsWith(entry.uuid.toLowerCase()));
  if (matches.length === 1) return { ok: true, uuid: matches[0]!.uuid, physicalIndex: matches[0]!.index };
  return {
    ok: false,
    reason:
      matches.length === 0
        ? `${entry.uuid} matches no device`
        : `${entry.uuid} is a prefix of ${matches.length} devices`,
  };
}

function sameUuid(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase();
}
