#!/usr/bin/env python3
"""Writes fixtures/reference-analysis/: the golden cross-rank and gap cases with their sample records
respelled and some counters moved past 2^53, and what the Python reference's analyses return for them.

The golden cases' expected results came from the reference on canonical inputs; these check the two
rules the reference is exact about on input it was not shown: which records are samples (its
cross-rank analysis takes `event_type.casefold() == "sample"`, its gap analysis
`str(event_type).strip().lower() == "sample"`, with Python's whitespace and case folding) and counters
past 2^53 (Python integers). Each case keeps only its edits (`edits.json`: line number -> the fields
that change), applied to the golden case's `input.jsonl` by the test
(`packages/analysis/test/analyses/reference-variants.test.ts`).

Usage: STORMLOG_REFERENCE_SOURCE=<checkout holding stormlog/> python3 scripts/python-interop/analysis_variants.py
(the reference's source is not installable here: PyPI is unreachable; bench/python-reference.py
explains the stand-ins for the modules `analyze` never calls).
"""
import json
import os
import random
import runpy
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(REPO, "fixtures", "golden")
OUT = os.path.join(REPO, "fixtures", "reference-analysis")

# Spellings of "sample" that one rule, both or neither takes: Python-only whitespace (\x1c-\x1f, \x85),
# whitespace both languages strip, JavaScript-only whitespace (\ufeff), case folding only casefold()
# does (U+017F), and look-alikes that are not samples to either.
SPELLINGS = [
    "Sample", "SAMPLE", " Sample ", "sample\t", "\u017fample", "\u017fAMPLE", "\ufeffsample", "samples",
    "\x1csample", "sample\x1f", "\x85sample", "\u00a0SAMPLE", "sample\u2003", "\u3000sample",
    "sample\u200b", "sample\n", "\x0bsample\x0c", "SAMPLE\u2028",
]
COUNTERS = ["allocator_allocated_bytes", "allocator_reserved_bytes", "device_used_bytes", "device_total_bytes"]


def load_reference():
    """The reference's modules, with bench/python-reference.py's stand-ins for torch, psutil and pynvml."""
    runpy.run_path(os.path.join(REPO, "bench", "python-reference.py"), run_name="stand_ins_only")
    from stormlog.analyzer import MemoryAnalyzer, _serialize_gap_finding
    from stormlog.distributed_analysis import summarize_cross_rank_analysis
    from stormlog.phases.replay import PhaseReplayIndex
    from stormlog.telemetry import telemetry_event_from_record

    return (
        MemoryAnalyzer,
        _serialize_gap_finding,
        summarize_cross_rank_analysis,
        PhaseReplayIndex,
        telemetry_event_from_record,
    )


def edits_for(lines, seed):
    """Seeded edits: about half the samples respelled, a fifth of the records' counters past 2^53."""
    chance = random.Random(seed)
    edits = {}
    for number, line in enumerate(lines, start=1):
        record = json.loads(line)
        edit = {}
        if record.get("event_type") == "sample" and chance.random() < 0.5:
            edit["event_type"] = chance.choice(SPELLINGS)
        if chance.random() < 0.2:
            lift = 2**53 + chance.randrange(1, 2**40)
            for key in COUNTERS:
                value = record.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    # Device totals stay above what is used, so ratios stay ratios.
                    edit[key] = value + (2 * lift if key == "device_total_bytes" else lift)
        if edit:
            edits[str(number)] = edit
    return edits


def main():
    if "STORMLOG_REFERENCE_SOURCE" not in os.environ:
        sys.exit("set STORMLOG_REFERENCE_SOURCE to a checkout of the Python Stormlog (see the docstring)")
    MemoryAnalyzer, serialize_gap_finding, summarize_cross_rank_analysis, PhaseReplayIndex, event_from_record = (
        load_reference()
    )
    for kind in ("cross-rank", "gap"):
        for case in sorted(os.listdir(os.path.join(GOLDEN, kind))):
            source = os.path.join(GOLDEN, kind, case, "input.jsonl")
            if not os.path.isfile(source):
                continue
            with open(source, encoding="utf-8", newline="") as handle:
                lines = [line for line in handle.read().split("\n") if line.strip()]
            edits = edits_for(lines, f"{kind}/{case}")
            events = []
            for number, line in enumerate(lines, start=1):
                record = json.loads(line)
                record.update(edits.get(str(number), {}))
                events.append(event_from_record(record))
            events.sort(key=lambda event: event.timestamp_ns)
            resolver = PhaseReplayIndex.from_events(events)
            if kind == "cross-rank":
                expected = summarize_cross_rank_analysis(events, phase_resolver=resolver)
            else:
                findings = MemoryAnalyzer().analyze_memory_gaps(events, phase_resolver=resolver)
                # As the reference serializes them, less the prose, which is PyTorch's (see fixtures/golden/README.md).
                expected = {
                    "gap_analysis": [
                        {
                            key: value
                            for key, value in serialize_gap_finding(finding).items()
                            if key not in ("description", "remediation")
                        }
                        for finding in findings
                    ]
                }
            target = os.path.join(OUT, kind, case)
            os.makedirs(target, exist_ok=True)
            with open(os.path.join(target, "edits.json"), "w", encoding="utf-8") as handle:
                # One edited line a row.
                rows = [
                    f"{json.dumps(number)}:{json.dumps(edit, sort_keys=True, separators=(',', ':'))}"
                    for number, edit in edits.items()
                ]
                handle.write("{\n" + ",\n".join(rows) + "\n}\n")
            with open(os.path.join(target, "expected.json"), "w", encoding="utf-8") as handle:
                json.dump(expected, handle, indent=1, sort_keys=True)
                handle.write("\n")
            print(f"{kind}/{case}: {len(edits)} records edited")


if __name__ == "__main__":
    main()
