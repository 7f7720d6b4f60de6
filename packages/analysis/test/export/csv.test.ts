import {
  decodeTelemetryLine,
  encodeTelemetryRecord,
  parseJson,
  TELEMETRY_V3_FIELDS,
  type TelemetryEvent,
} from "@stormlog/core";
import { describe, expect, it } from "vitest";
import { csvField } from "../../src/export/csv.js";
import { telemetryCsvHeader, telemetryCsvLines, telemetryEventToCsvRow } from "../../src/index.js";

/** A small RFC 4180 reader, independent of the writer. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') {
      quoted = true;
    } else if (c === ",") {
      row.push(field);
      field = "";
    } else if (c === "\n") {
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
    } else field += c;
  }
  return rows;
}

const record: TelemetryEvent = {
  schema_version: 3,
  session_id: "s-1",
  timestamp_ns: 1_765_000_668_835_601_123n,
  event_type: "warning",
  collector: "stormlog.cuda_tracker",
  sampling_interval_ms: 100,
  pid: 42,
  host: 'node, "a"',
  job_id: null,
  rank: 1,
  local_rank: 1,
  world_size: 2,
  device_id: 0,
  allocator_allocated_bytes: 1024,
  allocator_reserved_bytes: 2048,
  allocator_active_bytes: null,
  allocator_inactive_bytes: null,
  allocator_change_bytes: -5,
  device_used_bytes: 4096,
  device_free_bytes: null,
  device_total_bytes: 8192,
  context: "line one\nline two",
  metadata: {
    usage_percent: 85.5,
    huge: 12_345_678_901_234_567_890n,
    nested: { phase: "train / forward", list: [1, "a,b"] },
  },
};

describe("CSV export", () => {
  it("writes the reference's columns in its order", () => {
    expect(telemetryCsvHeader()).toBe(TELEMETRY_V3_FIELDS.join(","));
  });

  it("keeps metadata (as JSON), exact integers, nulls and awkward strings", async () => {
    let text = "";
    for await (const line of telemetryCsvLines([record, { ...record, context: "", metadata: {} }]))
      text += line;
    const [header, row, second] = parseCsv(text);
    expect(header).toEqual([...TELEMETRY_V3_FIELDS]);
    const cells = Object.fromEntries(header!.map((name, index) => [name, row![index]]));
    expect(cells.timestamp_ns).toBe("1765000668835601123");
    expect(cells.host).toBe('node, "a"');
    expect(cells.context).toBe("line one\nline two");
    expect(cells.job_id).toBe("");
    expect(cells.allocator_change_bytes).toBe("-5");
    expect(parseJson(cells.metadata!)).toEqual(record.metadata);
    // An empty string and a null differ on the wire: "" is quoted.
    expect(telemetryEventToCsvRow({ ...record, context: "" })).toContain(',"",');
    expect(second![header!.indexOf("metadata")]).toBe("{}");
  });

  it("writes counters past 2^53 with every digit read", () => {
    const line = encodeTelemetryRecord({ ...record, device_used_bytes: 0, device_total_bytes: 0 }).replace(
      '"device_total_bytes": 0',
      '"device_total_bytes": 72057594037927945',
    );
    const decoded = decodeTelemetryLine(line) as TelemetryEvent;
    const [header, row] = parseCsv(`${telemetryCsvHeader()}\n${telemetryEventToCsvRow(decoded)}\n`);
    expect(row![header!.indexOf("device_total_bytes")]).toBe("72057594037927945");
  });

  it("quotes only what needs quoting", () => {
    expect(csvField("plain")).toBe("plain");
    expect(csvField("a,b")).toBe('"a,b"');
    expect(csvField(" edge")).toBe('" edge"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
  });

  it("neutralizes a formula after leading spaces too (importers that trim them would run it)", () => {
    expect(csvField(" =1+1")).toBe('"\' =1+1"');
    expect(csvField("  @SUM(A1)")).toBe('"\'  @SUM(A1)"');
    expect(csvField(" plain")).toBe('" plain"');
  });

  it("neutralizes text a spreadsheet would run as a formula (leading ' and quotes)", async () => {
    expect(csvField('=HYPERLINK("http://x","y")')).toBe('"\'=HYPERLINK(""http://x"",""y"")"');
    for (const start of ["=", "+", "-", "@", "\t", "\r"]) {
      const value = `${start}1+2`;
      const field = csvField(value);
      expect(field.startsWith(`"'${start}`)).toBe(true);
      expect(parseCsv(`${field}\n`)[0]).toEqual([`'${value}`]);
    }
    // Only a first character makes a formula; numbers stay numbers, negative decimals given as text too.
    expect(csvField("a=b")).toBe("a=b");
    expect(csvField("-1.50")).toBe("-1.50");
    expect(csvField("-9")).toBe("-9");
    expect(csvField("-1e3")).toBe('"\'-1e3"');
    const hostile: TelemetryEvent = {
      ...record,
      host: "@SUM(1+1)",
      job_id: "=cmd|' /C calc'!A0",
      context: "+1",
      collector: "-x",
    };
    let text = "";
    for await (const line of telemetryCsvLines([hostile])) text += line;
    const [header, row] = parseCsv(text);
    const cells = Object.fromEntries(header!.map((name, index) => [name, row![index]!]));
    expect(cells.host).toBe("'@SUM(1+1)");
    expect(cells.job_id).toBe("'=cmd|' /C calc'!A0");
    expect(cells.context).toBe("'+1");
    expect(cells.collector).toBe("'-x");
    expect(cells.allocator_change_bytes).toBe("-5");
    for (const value of row!) expect(value).not.toMatch(/^[=+@\t\r]/);
  });
});
