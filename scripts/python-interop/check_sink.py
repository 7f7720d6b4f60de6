#!/usr/bin/env python3
"""Reads a sink directory the way the Python Stormlog's loader does (reference §2.1, §2.6, §5.3) and
fails loudly on anything it would reject. A stand-in for the reference loader: it applies the same
record validation (v3 field set, strict integer typing, ranges), the manifest reading and the session
ordering, with the standard library only.

Usage: python3 scripts/python-interop/check_sink.py SINK_DIR [SINK_DIR ...]
Prints one JSON object per directory: its sessions in the reference's order, with status, event count
and first/last timestamps.
"""
import json
import os
import re
import sys

REQUIRED = [
    "schema_version", "session_id", "timestamp_ns", "event_type", "collector", "sampling_interval_ms",
    "pid", "host", "device_id", "allocator_allocated_bytes", "allocator_reserved_bytes",
    "allocator_active_bytes", "allocator_inactive_bytes", "allocator_change_bytes", "device_used_bytes",
    "device_free_bytes", "device_total_bytes", "context", "metadata",
]
OPTIONAL = ["job_id", "rank", "local_rank", "world_size"]
PRIORITY = {"completed": 0, "interrupted": 1, "incomplete": 2, "running": 3}
SEGMENT = re.compile(r"^segment-(\d{6})\.jsonl$")


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def fail(where, message):
    raise SystemExit(f"{where}: {message}")


def validate(record, where):
    if not isinstance(record, dict):
        fail(where, "not a JSON object")
    unknown = sorted(set(record) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        fail(where, f"Unknown telemetry fields: {unknown}")
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        fail(where, f"Missing required telemetry fields: {missing}")
    if not is_int(record["schema_version"]) or record["schema_version"] != 3:
        fail(where, f"schema_version must be 3, got {record['schema_version']!r}")
    for key in ("session_id", "event_type", "collector", "host"):
        if not isinstance(record[key], str) or not record[key].strip():
            fail(where, f"{key} must be a non-empty string")
    non_negative = ["timestamp_ns", "sampling_interval_ms", "allocator_allocated_bytes",
                    "allocator_reserved_bytes", "device_used_bytes"]
    for key in non_negative:
        if not is_int(record[key]) or record[key] < 0:
            fail(where, f"{key} must be an integer >= 0, got {record[key]!r}")
    for key in ("allocator_active_bytes", "allocator_inactive_bytes", "device_free_bytes", "device_total_bytes"):
        value = record[key]
        if value is not None and (not is_int(value) or value < 0):
            fail(where, f"{key} must be null or an integer >= 0, got {value!r}")
    if not is_int(record["pid"]) or record["pid"] < -1:
        fail(where, f"pid must be an integer >= -1, got {record['pid']!r}")
    for key in ("device_id", "allocator_change_bytes"):
        if not is_int(record[key]):
            fail(where, f"{key} must be an integer, got {record[key]!r}")
    if record["context"] is not None and not isinstance(record["context"], str):
        fail(where, "context must be a string or null")
    if not isinstance(record["metadata"], dict):
        fail(where, "metadata must be an object")
    job_id = record.get("job_id")
    if job_id is not None and (not isinstance(job_id, str) or not job_id.strip()):
        fail(where, "job_id must be null or a non-empty string")
    world = record.get("world_size", 1)
    if not is_int(world) or world < 1:
        fail(where, f"world_size must be an integer >= 1, got {world!r}")
    for key in ("rank", "local_rank"):
        value = record.get(key, 0)
        if not is_int(value) or value < 0 or value >= world:
            fail(where, f"{key} must be an integer in [0, world_size), got {value!r}")
    total = record["device_total_bytes"]
    if total is not None:
        if record["device_used_bytes"] > total:
            fail(where, "device_used_bytes exceeds device_total_bytes")
        if record["device_free_bytes"] is not None and record["device_free_bytes"] > total:
            fail(where, "device_free_bytes exceeds device_total_bytes")


def read_segment(path):
    with open(path, "rb") as handle:
        data = handle.read()
    text = data.decode("utf-8")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            # A malformed last line without a trailing newline is a truncated write: dropped.
            if number == len(lines) and not text.endswith("\n"):
                continue
            fail(f"{path}:{number}", "malformed JSON line")
        validate(record, f"{path}:{number}")
        # Canonical lines: json.dumps(record, sort_keys=True) gives the same bytes back.
        if json.dumps(record, sort_keys=True) != line:
            fail(f"{path}:{number}", "line is not json.dumps(record, sort_keys=True)")
        records.append(record)
    return records


def load(directory):
    manifest_path = os.path.join(directory, "manifest.json")
    with open(manifest_path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    if manifest.get("schema_version") != 2 or manifest.get("format") != "stormlog.append_only_telemetry_sink":
        fail(manifest_path, "not a schema_version 2 stormlog.append_only_telemetry_sink manifest")
    summary_keys = ["session_id", "status", "started_at_ns", "ended_at_ns", "host", "pid", "job_id", "rank",
                    "local_rank", "world_size", "source"]
    for session in manifest["sessions"]:
        if list(session) != summary_keys:
            fail(manifest_path, f"session summary keys {list(session)} != {summary_keys}")
        if session["status"] not in PRIORITY:
            fail(manifest_path, f"unknown status {session['status']!r}")
    started = [(s["started_at_ns"], s["session_id"]) for s in manifest["sessions"]]
    if started != sorted(started):
        fail(manifest_path, "sessions are not sorted by (started_at_ns, session_id)")
    segment_keys = ["filename", "event_count", "size_bytes", "closed", "session_id"]
    listed = {}
    for segment in manifest["segments"]:
        if list(segment) != segment_keys:
            fail(manifest_path, f"segment keys {list(segment)} != {segment_keys}")
        if not SEGMENT.match(segment["filename"]):
            fail(manifest_path, f"bad segment filename {segment['filename']!r}")
        listed[segment["filename"]] = segment
    names = sorted(set(n for n in listed if os.path.exists(os.path.join(directory, n)))
                   | set(n for n in os.listdir(directory) if SEGMENT.match(n)))
    events = {}
    for name in names:
        default = listed.get(name, {}).get("session_id")
        for record in read_segment(os.path.join(directory, name)):
            events.setdefault(record.get("session_id") or default, []).append(record)
    sessions = []
    for summary in manifest["sessions"]:
        found = sorted(events.get(summary["session_id"], []), key=lambda r: r["timestamp_ns"])
        sessions.append((summary, found))
    sessions.sort(key=lambda item: (PRIORITY.get(item[0]["status"], 99),
                                    -(item[0]["ended_at_ns"] or item[0]["started_at_ns"]),
                                    -item[0]["started_at_ns"], item[0]["session_id"]))
    return [{
        "session_id": summary["session_id"],
        "status": summary["status"],
        "event_count": len(found),
        "first_timestamp_ns": found[0]["timestamp_ns"] if found else None,
        "last_timestamp_ns": found[-1]["timestamp_ns"] if found else None,
    } for summary, found in sessions]


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for directory in argv:
        print(json.dumps({"dir": directory, "sessions": load(directory)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
