import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseJson, stringifyJson } from "@stormlog/core";
import { Ajv2020, type ErrorObject } from "ajv/dist/2020.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { analyzeEvents, renderTelemetryAnalysis, reportToJson } from "../../src/index.js";
import { trackedJob } from "../support/tracked-job.js";
import { reportKeyPaths, type SchemaNode, schemaKeyPaths, typeKeyPaths } from "./report-schema-keys.js";

const SCHEMA_URL = new URL("../../schemas/report.schema.json", import.meta.url);
const schema = JSON.parse(readFileSync(SCHEMA_URL, "utf8")) as SchemaNode;
const validate = new Ajv2020({ strict: true, allErrors: true }).compile(schema);
const FIXTURES = join(import.meta.dirname, "../../../../fixtures/golden");

/** A report as a JSON Schema validator sees it: the CLI's text, read back with JSON.parse. */
type Report = Record<string, unknown>;

function cases(set: string): string[] {
  return readdirSync(join(FIXTURES, set))
    .filter((name) => !name.startsWith("."))
    .sort();
}

/** Every golden input, as `stormlog analyze` is given it. */
const goldenInputs: [string, string][] = [
  ...["cross-rank", "gap", "leaks"].flatMap((set) =>
    cases(set).map((name): [string, string] => [`${set}/${name}`, join(FIXTURES, set, name, "input.jsonl")]),
  ),
  ...cases("python-sink").map((name): [string, string] => [
    `python-sink/${name}`,
    join(FIXTURES, "python-sink", name, "sink"),
  ]),
];

/** What `stormlog analyze --format json` prints for `path` (the same function, no index written). */
async function cliReport(
  path: string,
  options: { sessionId?: string; index?: boolean } = {},
): Promise<string> {
  return renderTelemetryAnalysis(path, { format: "json", index: false, ...options });
}

function conforms(report: unknown): ErrorObject[] {
  return validate(report) ? [] : [...(validate.errors ?? [])];
}

let job: ReturnType<typeof trackedJob>;
/** Reports of the tracker's sink: the rank group (twice: the index built, then used) and one rank's session. */
const tracked: Record<"group" | "groupReused" | "single", string> = {
  group: "",
  groupReused: "",
  single: "",
};
const golden = new Map<string, Report>();
/** The reports every key-path check runs over: golden inputs, the tracker's, and an empty analysis. */
const realReports: Report[] = [];

beforeAll(async () => {
  job = trackedJob();
  tracked.group = await cliReport(job.root, { index: true });
  tracked.groupReused = await cliReport(job.root, { index: true });
  tracked.single = await cliReport(job.root, { sessionId: job.sessionIds[1]! });
  for (const [name, path] of goldenInputs) golden.set(name, JSON.parse(await cliReport(path)) as Report);
  realReports.push(...golden.values());
  for (const text of Object.values(tracked)) realReports.push(JSON.parse(text) as Report);
  realReports.push(JSON.parse(stringifyJson(reportToJson(analyzeEvents([])))) as Report);
});
afterAll(() => job?.remove());

describe("report.schema.json accepts the reports stormlog analyze writes", () => {
  it.each(goldenInputs)("%s", (name) => {
    expect(conforms(golden.get(name))).toEqual([]);
  });

  it("of a sink root the tracker wrote for two ranks, with births, collector health and alerts", () => {
    const report = JSON.parse(tracked.group) as Report & {
      session: { merged_session_ids?: string[] };
      cross_rank_analysis?: { participating_ranks: number[] };
      leaks: { births: unknown }[];
      collector_health: { transitions: unknown[] };
      alerts: { items: { oom_reason: string | null }[] };
      sink: { kind: string; directories: unknown[] };
    };
    expect(conforms(report)).toEqual([]);
    // The branches this input is here for.
    expect(report.session.merged_session_ids).toEqual(job.sessionIds);
    expect(report.cross_rank_analysis?.participating_ranks).toEqual([0, 1]);
    expect(report.leaks.some((leak) => leak.births !== null)).toBe(true);
    expect(report.collector_health.transitions.length).toBeGreaterThanOrEqual(4);
    expect(report.alerts.items.some((item) => item.oom_reason !== null)).toBe(true);
    expect(report.sink).toMatchObject({ kind: "sink-root" });
    expect(report.sink.directories).toHaveLength(2);
  });

  it("again with the index the first analysis built, and for one rank's session alone", () => {
    expect(tracked.groupReused).toBe(tracked.group);
    const single = JSON.parse(tracked.single) as Report;
    expect(conforms(single)).toEqual([]);
    expect(single).not.toHaveProperty("cross_rank_analysis");
    expect(single.session).not.toHaveProperty("merged_session_ids");
  });

  it("of an analysis with no events (every nullable field null)", () => {
    const empty = realReports[realReports.length - 1]!;
    expect(conforms(empty)).toEqual([]);
    expect(empty.session).toMatchObject({ selected_session_id: null, started_at_ns: null });
  });

  it("whose *_ns integers exceed 2^53, which JSON.parse rounds and parseJson keeps", () => {
    const exact = parseJson(tracked.group) as { session: { started_at_ns: unknown } };
    expect(exact.session.started_at_ns).toBe(job.startedAtNs);
    expect(job.startedAtNs > BigInt(Number.MAX_SAFE_INTEGER)).toBe(true);
    const rounded = (JSON.parse(tracked.group) as { session: { started_at_ns: number } }).session
      .started_at_ns;
    expect(BigInt(rounded)).not.toBe(job.startedAtNs);
  });
});

describe("report.schema.json rejects", () => {
  /** A deep copy of the tracker's rank-group report, changed by `change`. */
  const changed = (change: (report: Record<string, Record<string, unknown>>) => void): Report => {
    const report = JSON.parse(tracked.group) as Record<string, Record<string, unknown>>;
    change(report);
    return report;
  };
  const firstOf = (list: unknown) => (list as Record<string, unknown>[])[0]!;
  const rejected: [string, (report: Record<string, Record<string, unknown>>) => void, string, string][] = [
    [
      "a timestamp written as a string",
      (r) => {
        r.session!.started_at_ns = String(r.session!.started_at_ns);
      },
      "/session/started_at_ns",
      "type",
    ],
    [
      "a fractional nanosecond count",
      (r) => {
        (r.summary!.collector_health as Record<string, unknown>).degraded_time_ns = 1.5;
      },
      "/summary/collector_health/degraded_time_ns",
      "type",
    ],
    [
      "a missing required field",
      (r) => {
        delete r.summary!.peaks;
      },
      "/summary",
      "required",
    ],
    [
      "an unknown top-level key",
      (r) => {
        r.report_version = {};
      },
      "",
      "additionalProperties",
    ],
    [
      "an unknown key in a phase",
      (r) => {
        firstOf(r.phases).unit = "bytes";
      },
      "/phases/0",
      "additionalProperties",
    ],
    [
      "a verdict outside the enum",
      (r) => {
        firstOf(r.leaks).verdict = "leak";
      },
      "/leaks/0/verdict",
      "enum",
    ],
    [
      "a null cross-rank section (the report leaves it out instead)",
      (r) => {
        r.cross_rank_analysis = null as unknown as Record<string, unknown>;
      },
      "/cross_rank_analysis",
      "type",
    ],
    [
      "a leak verdict with a reason (only insufficient_data has one)",
      (r) => {
        const leak = (r.leaks as unknown as Record<string, unknown>[]).find((l) => l.verdict === "leaking")!;
        leak.reason = "too few occurrences";
      },
      "/leaks/",
      "type",
    ],
  ];
  it.each(rejected)("%s", (_name, change, path, keyword) => {
    expect(conforms(JSON.parse(tracked.group))).toEqual([]);
    const errors = conforms(changed(change));
    expect(errors.length).toBeGreaterThan(0);
    expect(errors.some((error) => error.instancePath.startsWith(path) && error.keyword === keyword)).toBe(
      true,
    );
  });

  it("gap evidence of another classification", () => {
    const fragmentation = realReports
      .flatMap((report) => report.gap_analysis as Record<string, unknown>[])
      .find((finding) => finding.classification === "fragmentation_like");
    expect(fragmentation).toBeDefined();
    const report = JSON.parse(tracked.group) as { gap_analysis: Record<string, unknown>[] };
    const finding = report.gap_analysis.find((f) => f.classification === "persistent_drift")!;
    expect(conforms(report)).toEqual([]);
    finding.evidence = fragmentation!.evidence;
    expect(conforms(report).some((error) => error.keyword === "if")).toBe(true);
  });
});

describe("report.schema.json, the reports and the TypeScript type name the same keys", () => {
  it("every key the schema names is written by some real report, and no report writes another", () => {
    const written = new Set<string>();
    for (const report of realReports) for (const path of reportKeyPaths(schema, report)) written.add(path);
    expect([...written].sort()).toEqual([...schemaKeyPaths(schema, { expand: false }).keys()].sort());
  });

  it("AnalysisReport in src/report/types.ts as reportToJson writes it: keys, required and nullable alike", () => {
    const fromType = typeKeyPaths({
      tsconfig: join(import.meta.dirname, "../../tsconfig.json"),
      file: join(import.meta.dirname, "../../src/report/types.ts"),
      typeName: "AnalysisReport",
      // reportToJson drops what JSON does not carry, and a null cross_rank_analysis.
      omit: ["input", "index"],
      optionalInsteadOfNull: ["cross_rank_analysis"],
    });
    const fromSchema = schemaKeyPaths(schema, { expand: true });
    expect(Object.fromEntries([...fromSchema].sort())).toEqual(Object.fromEntries([...fromType].sort()));
  });
});
