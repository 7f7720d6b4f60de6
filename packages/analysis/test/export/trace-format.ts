/**
 * A checker for the Chrome Trace Event Format rules that Perfetto's JSON importer relies on,
 * independent of the exporter's code: it reads the JSON text and returns every violation found.
 */

/** A trace event as parsed back from JSON. */
export interface ParsedTraceEvent {
  name?: unknown;
  ph?: unknown;
  pid?: unknown;
  tid?: unknown;
  ts?: unknown;
  dur?: unknown;
  s?: unknown;
  cat?: unknown;
  args?: unknown;
}

/** A parsed JSON-object-format trace. */
export interface ParsedTrace {
  traceEvents: ParsedTraceEvent[];
  displayTimeUnit?: unknown;
  otherData?: unknown;
}

const METADATA: Readonly<Record<string, { key: string; type: "string" | "integer"; thread: boolean }>> = {
  process_name: { key: "name", type: "string", thread: false },
  process_labels: { key: "labels", type: "string", thread: false },
  process_sort_index: { key: "sort_index", type: "integer", thread: false },
  thread_name: { key: "name", type: "string", thread: true },
  thread_sort_index: { key: "sort_index", type: "integer", thread: true },
};

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

const finiteNumber = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value);

/**
 * Parses `text` with `JSON.parse` (which rejects NaN and Infinity tokens) and checks each event:
 * `ph` among M, X, C, i, I, B, E; integer `pid` (>= 1: pid 0 is the idle task in Perfetto) and
 * integer `tid` where present; `ts` a finite number >= 0 (microseconds) on every timed event; `X`
 * with a finite `dur` >= 0 and a `tid`; `C` with numeric args only; instants with scope g, p or t;
 * `M` events with the argument their name requires; `B`/`E` balanced per thread; `X` slices nested
 * per thread (a child inside its parent, in the exact nanoseconds kept in args when present).
 */
export function checkChromeTrace(text: string): { trace: ParsedTrace; problems: string[] } {
  const trace = JSON.parse(text) as ParsedTrace;
  const problems: string[] = [];
  const problem = (index: number, message: string): void => {
    if (problems.length < 50) problems.push(`event ${index}: ${message}`);
  };
  if (!isObject(trace) || !Array.isArray(trace.traceEvents))
    return { trace, problems: ["no traceEvents array"] };
  if (trace.displayTimeUnit !== "ms" && trace.displayTimeUnit !== "ns")
    problems.push(`displayTimeUnit ${String(trace.displayTimeUnit)} is neither ms nor ns`);
  if (trace.otherData !== undefined && !isObject(trace.otherData))
    problems.push("otherData is not an object");
  const open = new Map<string, number>();
  const slices = new Map<
    string,
    { ts: number; end: number; startNs: bigint | null; endNs: bigint | null }[]
  >();
  for (const [index, event] of trace.traceEvents.entries()) {
    checkEvent(index, event);
  }
  function checkEvent(index: number, event: ParsedTraceEvent): void {
    if (!isObject(event)) {
      problem(index, "not an object");
      return;
    }
    if (typeof event.name !== "string" || event.name === "")
      problem(index, "name must be a non-empty string");
    if (!Number.isSafeInteger(event.pid) || (event.pid as number) < 1)
      problem(index, `pid ${String(event.pid)}`);
    if (event.tid !== undefined && !Number.isSafeInteger(event.tid))
      problem(index, `tid ${String(event.tid)}`);
    if (event.args !== undefined && !isObject(event.args)) problem(index, "args must be an object");
    const ph = event.ph;
    if (ph !== "M" && (!finiteNumber(event.ts) || event.ts < 0)) problem(index, `ts ${String(event.ts)}`);
    const lane = `${String(event.pid)}/${String(event.tid)}`;
    switch (ph) {
      case "M": {
        const rule = METADATA[event.name as string];
        if (rule === undefined) {
          problem(index, `unknown metadata ${String(event.name)}`);
          return;
        }
        const value = isObject(event.args) ? event.args[rule.key] : undefined;
        const ok = rule.type === "string" ? typeof value === "string" : Number.isSafeInteger(value);
        if (!ok) problem(index, `${String(event.name)} needs args.${rule.key} (${rule.type})`);
        if (rule.thread && event.tid === undefined) problem(index, `${String(event.name)} needs a tid`);
        return;
      }
      case "X": {
        if (!finiteNumber(event.dur) || event.dur < 0) problem(index, `dur ${String(event.dur)}`);
        if (event.tid === undefined) problem(index, "X needs a tid");
        const args = isObject(event.args) ? event.args : {};
        const startNs = typeof args.start_ns === "string" ? BigInt(args.start_ns) : null;
        const endText = args.cut_at_parent_end_ns ?? args.end_ns;
        const endNs = typeof endText === "string" ? BigInt(endText) : null;
        const list = slices.get(lane) ?? [];
        list.push({
          ts: event.ts as number,
          end: (event.ts as number) + (event.dur as number),
          startNs,
          endNs,
        });
        slices.set(lane, list);
        return;
      }
      case "C": {
        if (!isObject(event.args) || Object.keys(event.args).length === 0) {
          problem(index, "C needs args with at least one series");
          return;
        }
        for (const [key, value] of Object.entries(event.args))
          if (!finiteNumber(value)) problem(index, `counter series ${key} is ${String(value)}`);
        return;
      }
      case "i":
      case "I":
        if (event.s !== undefined && event.s !== "g" && event.s !== "p" && event.s !== "t")
          problem(index, `instant scope ${String(event.s)}`);
        return;
      case "B":
        open.set(lane, (open.get(lane) ?? 0) + 1);
        return;
      case "E": {
        const depth = open.get(lane) ?? 0;
        if (depth === 0) problem(index, `E without B on ${lane}`);
        else open.set(lane, depth - 1);
        return;
      }
      default:
        problem(index, `unexpected ph ${String(ph)}`);
    }
  }
  for (const [lane, depth] of open) if (depth !== 0) problems.push(`${depth} B without E on ${lane}`);
  for (const [lane, list] of slices) {
    list.sort((a, b) => a.ts - b.ts || b.end - a.end);
    const stack: (typeof list)[number][] = [];
    for (const slice of list) {
      while (stack.length > 0 && stack[stack.length - 1]!.end <= slice.ts) stack.pop();
      const parent = stack[stack.length - 1];
      if (parent !== undefined) {
        const exactInside =
          parent.startNs === null || slice.startNs === null || parent.endNs === null || slice.endNs === null
            ? true
            : slice.startNs >= parent.startNs && slice.endNs <= parent.endNs;
        if (slice.end > parent.end + 1e-6 || !exactInside)
          problems.push(
            `${lane}: slice at ${slice.ts} (end ${slice.end}) overlaps its parent ending at ${parent.end}`,
          );
      }
      stack.push(slice);
    }
  }
  return { trace, problems };
}

/** Slices per nesting depth (`args.depth`), to check that nested phases were exercised. */
export function sliceDepths(trace: ParsedTrace): Map<number, number> {
  const depths = new Map<number, number>();
  for (const event of trace.traceEvents) {
    if (event.ph !== "X" || !isObject(event.args)) continue;
    const depth = Number(event.args.depth);
    depths.set(depth, (depths.get(depth) ?? 0) + 1);
  }
  return depths;
}
