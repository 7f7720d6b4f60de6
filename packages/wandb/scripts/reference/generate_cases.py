"""Generates W&B export cases of the golden cases' kinds (tracking sessions of 0 to 2000 events, alert storms,
odd statistics, missing or misplaced artifact folders, attribution files, diagnose bundles broken on purpose, W&B
settings), laid out as the golden cases, their sinks written by the reference's own sink writer.

Usage: STORMLOG_PY_REF=<checkout of the reference> python3 generate_cases.py <out-dir> <first-seed> <count>
then record_case.py on each case for its expected.json.
"""
import json, os, random, shutil, sys, time
from pathlib import Path

sys.path.insert(0, os.environ["STORMLOG_PY_REF"])
from stormlog.telemetry_sink import AppendOnlyTelemetrySink, TelemetrySinkConfig  # noqa: E402
from stormlog.session import create_session_summary  # noqa: E402

CONTEXTS = [None, None, "memory high", "OOM risk: reserved > 95%", "<b>spike</b> & 'quote' \"dq\"", "ünïcode ✓ context", "", "phase: train/forward"]
TYPES = ["sample"] * 12 + ["start", "warning", "critical", "error", "peak", "phase_enter", "phase_exit", "collector_degraded"]
SESSION_IDS = ["{uuid}", "nightly_{n}.rank-0", "rαnk 2 — ä/ö", "job 7/rank 3", "{uuid}", "a", "    ", "x" * 30]


def uuid(r):
    h = "%032x" % r.getrandbits(128)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def make_events(r, n, sid, ident, device_mode, alert_mode, ooo):
    base = 1765000000000000000 + r.randrange(10**15)
    ts = base
    out = []
    total = r.choice([85899345920, 17179869184]) if device_mode != "never" else None
    for i in range(n):
        ts += r.choice([100_000_000, 99_000_000, 101_234_567, 0 if ooo else 100_000_000])
        if alert_mode == "storm":
            et = r.choice(["warning", "critical", "error", "peak", "sample"])
        elif alert_mode == "dense":
            et = r.choice(["warning", "sample", "sample", "peak", "critical"])
        else:
            et = r.choice(TYPES)
        alloc = r.randrange(0, 8 * 2**30)
        res = alloc + r.randrange(0, 2**30)
        rec = {
            "schema_version": 3, "session_id": sid, "timestamp_ns": ts, "event_type": et,
            "collector": "stormlog.cuda_tracker", "sampling_interval_ms": 100, "pid": 4242, "host": "trainer-a",
            "device_id": 0, "allocator_allocated_bytes": alloc, "allocator_reserved_bytes": res,
            "allocator_active_bytes": r.choice([None, alloc]), "allocator_inactive_bytes": None,
            "allocator_change_bytes": r.randrange(-2**27, 2**27), "device_used_bytes": res + r.randrange(0, 2**28),
            "device_free_bytes": None, "device_total_bytes": None, "context": r.choice(CONTEXTS), "metadata": {},
        }
        if device_mode == "always" or (device_mode == "mixed" and r.random() < 0.5):
            rec["device_total_bytes"] = total if total is not None else 85899345920
        if ident is not None:
            job, rank, world = ident[0], ident[1], ident[2]
            rec.update({"job_id": job, "rank": rank, "local_rank": rank % 8, "world_size": world})
            if ident[3] and r.random() < 0.2:  # mixed ranks
                rec["rank"] = (rank + 1) % world
                rec["local_rank"] = rec["rank"] % 8
                if r.random() < 0.3:
                    rec["job_id"] = "other-job"
        out.append(rec)
    if ooo:
        r.shuffle(out)
    return out


def write_sink(r, root, sid, events, status_mode, ident):
    job, rank, world = (ident[0], ident[1], ident[2]) if ident else (None, 0, 1)
    summary = create_session_summary(source=r.choice(["stormlog.tracker", "stormlog.tfjs"]), session_id=sid,
                                      host="trainer-a", pid=4242, job_id=job, rank=rank, local_rank=rank % 8, world_size=world)
    sink = AppendOnlyTelemetrySink(TelemetrySinkConfig(root_dir=Path(root), flush_every_events=r.choice([10, 50])))
    sink.start_session(summary)
    for e in events:
        sink.append(e)
    if status_mode == "crash":
        sink.flush(force=True)
        sink._stop_flush_thread()
        if sink._handle is not None:
            sink._handle.close()
            sink._handle = None
        AppendOnlyTelemetrySink(TelemetrySinkConfig(root_dir=Path(root)))  # reopen: marks interrupted
    else:
        sink.close(session_status="interrupted" if status_mode == "interrupted" else "completed")


def stats(r):
    base = {
        "peak_memory": r.randrange(2**33), "total_events": r.randrange(1000), "alert_count": r.randrange(400),
        "current_memory_allocated": r.randrange(2**33), "current_memory_reserved": r.randrange(2**33),
        "memory_utilization_percent": round(r.random() * 100, r.choice([1, 3, 6])), "total_allocations": r.randrange(10**6),
        "total_deallocations": r.randrange(10**6), "total_allocation_bytes": r.randrange(10**15),
        "total_deallocation_bytes": r.randrange(10**15), "tracking_duration_seconds": round(r.random() * 100, 3),
        "allocations_per_second": r.random() * 5000, "bytes_allocated_per_second": r.random() * 1e9,
        "history_retained_events": r.randrange(1000), "history_dropped_events": r.randrange(500),
        "rollover_count": r.randrange(3), "pruned_segment_count": r.randrange(3), "pruned_bytes": r.randrange(10**7),
        "final_retained_files": r.randrange(9), "final_retained_bytes": r.randrange(10**8),
        "backend": r.choice(["cuda", "rocm", "cpu", "tfjs-node", None, ["x"], {"a": 1}, 3]),
        "collector_health_status": r.choice(["healthy", "failed", None, "degraded"]),
        "collector_last_error": r.choice([None, "timeout reading counters", ""]),
        "session_status": r.choice(["completed", "interrupted", None, "degraded-but-done", 5]),
        "collector_next_retry_epoch_s": 1765000000.5, "device_name": "NVIDIA A100 80GB",
    }
    if r.random() < 0.5:
        for k in r.sample(list(base), r.randrange(1, 8)):
            del base[k]
    if r.random() < 0.5:
        for k in r.sample(list(base), min(len(base), r.randrange(1, 6))):
            base[k] = r.choice(["n/a", None, [1, 2], {"value": 3}, True, False, 0.0, 1.0, -1, 2**60])
    return base


def tensor_json(r):
    entries = []
    for i in range(r.choice([0, 1, 3, 12, 25, 205])):
        tensors = []
        for _ in range(r.choice([0, 1, 2, 3])):
            t = {"shape": r.choice([[4, 4], [], [2, 3, 224, 224], "4x4", [1024], [2.5]]),
                 "dtype": r.choice(["torch.float32", "float16", "int32"]),
                 "size_bytes": r.choice([0, 64, 4096, 1048576, 3145728, 2097152, True, 1.5, "12"])}
            if r.random() < 0.1:
                del t["shape"]
            if r.random() < 0.1:
                t = r.choice(["junk", 5, None])
            tensors.append(t)
        e = {"storage_ptr": r.choice(["0x7f%08x" % r.getrandbits(32), 12345, None]), "tensors": tensors}
        if r.random() < 0.8:
            e["tensor_count"] = r.choice([len(tensors), len(tensors), len(tensors), "3", 2.0, True, None, "abc", " 4 "])
        if r.random() < 0.7:
            e["names"] = r.choice([["model.layer%d.weight" % i], ["a", "b", "c", "d"], [], [1, None, 2.5], "notalist"])
        if r.random() < 0.05:
            e = "junk"
        entries.append(e)
    return {"attributed_storage_pointers": entries}


def attribution_files(r, d, corrupt_pickle):
    d.mkdir(parents=True, exist_ok=True)
    names = ["cuda_allocator_state_history_annotated.html", "cuda_allocator_state_history.html",
             "cuda_tensor_attribution.json", "cuda_allocation_attribution.json", "cuda_native_debug_metadata.json"]
    for n in names:
        if r.random() < 0.75:
            p = d / n
            if n == "cuda_tensor_attribution.json":
                p.write_text(json.dumps(tensor_json(r)))
            elif n == "cuda_native_debug_metadata.json":
                p.write_text(json.dumps(r.choice([{"history_recorded": True, "storage_pointer_count": 25},
                                                   {"history_recorded": "yes"}, {"history_recorded": False, "storage_pointer_count": 25.0}, {}, [1]])))
            else:
                p.write_text("<html><body>%s</body></html>" % n)
    if corrupt_pickle:
        (d / "cuda_allocator_snapshot.pickle").write_bytes(b"not a pickle")


def wandb_config(r):
    return {
        "enabled": True,
        "project": r.choice([None, "stormlog-tests", "tfjs-memory", ""]),
        "entity": r.choice([None, None, "team-a"]),
        "mode": r.choice([None, "online", "offline"]),
        "run_id": r.choice([None, None, "r%06x" % r.getrandbits(24)]),
        "run_name": r.choice([None, None, "nightly run #7", ""]),
        "group": r.choice([None, None, "grp-override"]),
        "job_type": r.choice([None, None, "train"]),
        "log_tables": r.choice([None, True, True, False]),
        "log_artifacts": r.choice([None, True, False, True]),
        "log_attribution": r.choice([None, True, False, True]),
    }


def tracking_case(r, inp):
    n = r.choice([0, 1, 2, 3, r.randrange(4, 61), r.randrange(61, 250), r.randrange(249, 253), r.randrange(300, 2001), 17, 33])
    alert_mode = r.choice(["normal", "normal", "storm", "dense"])
    if alert_mode == "storm":
        n = max(n, r.randrange(400, 800))
    sid = r.choice(SESSION_IDS).format(uuid=uuid(r), n=r.randrange(1000))
    if not sid.strip():
        sid = uuid(r)
    ident = None if r.random() < 0.25 else (r.choice([None, "job-%d" % r.randrange(99999)]),) + (lambda w: (r.randrange(w), w))(r.choice([1, 2, 4, 8])) + (r.random() < 0.2,)
    if ident is not None and ident[2] == 1:
        ident = (ident[0], 0, 1, ident[3])
    device_mode = r.choice(["always", "never", "mixed"])
    ooo = r.random() < 0.15
    events = make_events(r, n, sid, ident, device_mode, alert_mode, ooo)
    sink_name = r.choice(["sink", "telemetry", "stormlog-sink-rank0"])
    write_sink(r, inp / sink_name, sid, events, r.choice(["close", "interrupted", "crash"]), ident)
    cfg = {"kind": "tracking", "command_name": r.choice(["stormlog-track", "gpumemprof-track", "tfmemprof-track"]),
           "wandb_config": wandb_config(r), "active_run": r.random() < 0.15, "events_sink_dir": sink_name,
           "session_id": sid, "session_summary": "from_sink" if r.random() < 0.85 else None,
           "output_path": None, "telemetry_sink_dir": None, "oom_dump_path": None, "attribution_bundle_dir": None}
    if r.random() < 0.7:
        out = r.choice(["out/memory_events.json", "out/track.json", "track.csv"])
        if r.random() < 0.85:
            (inp / out).parent.mkdir(parents=True, exist_ok=True)
            (inp / out).write_text('{"events": %d, "note": "track output"}\n' % n)
        cfg["output_path"] = out
    if r.random() < 0.7:
        cfg["telemetry_sink_dir"] = sink_name if r.random() < 0.85 else "missing-sink"
    if r.random() < 0.5:
        kind = r.choice(["dir", "dir-attr", "file", "nested"])
        if kind == "file":
            (inp / "oom-dump.txt").write_text("not a folder")
            cfg["oom_dump_path"] = "oom-dump.txt"
        else:
            d = inp / ("oom" if kind != "nested" else "oom-dumps/oom-dump-0001")
            d.mkdir(parents=True, exist_ok=True)
            (d / "oom_dump_manifest.json").write_text('{"reason": "oom"}')
            (d / "ring_buffer.jsonl").write_text('{"event": 1}\n')
            if kind in ("dir-attr", "nested"):
                attribution_files(r, d, r.random() < 0.3)
            cfg["oom_dump_path"] = str(d.relative_to(inp))
    if r.random() < 0.4:
        kind = r.choice(["dir", "same", "missing", "file"])
        if kind == "dir":
            attribution_files(r, inp / "attribution", r.random() < 0.3)
            cfg["attribution_bundle_dir"] = "attribution"
        elif kind == "same" and cfg["oom_dump_path"] and cfg["oom_dump_path"] != "oom-dump.txt":
            cfg["attribution_bundle_dir"] = cfg["oom_dump_path"] + r.choice(["", "/"])
        elif kind == "file":
            (inp / "attr.txt").write_text("x")
            cfg["attribution_bundle_dir"] = "attr.txt"
        else:
            cfg["attribution_bundle_dir"] = "no-attribution"
    (inp / "stats.json").write_text(json.dumps(stats(r), indent=2))
    return cfg


def diagnose_case(r, inp):
    cfg = {"kind": "diagnose", "command_name": r.choice(["stormlog-diagnose", "gpumemprof-diagnose", "tfmemprof-diagnose"]),
           "wandb_config": wandb_config(r), "active_run": r.random() < 0.15}
    name = r.choice(["diag-out", "stormlog-diagnose-20251207-150939"])
    if r.random() < 0.1:
        cfg["artifact_dir"] = "no-such-bundle"
        return cfg
    d = inp / name
    d.mkdir(parents=True)
    session = {"session_id": r.choice([uuid(r), "nightly_928.rank-0", "rαnk ä/ö"]), "status": r.choice(["completed", "interrupted", " Completed ", "bogus"]),
               "started_at_ns": r.choice([1765000000000000000, "1765000000000000000", 1.5, "x", [1], float("inf"), " 17_65 "]), "ended_at_ns": None,
               "host": r.choice(["trainer-a", "", 5]), "pid": r.choice([1, "2", 3.7, None, True]), "job_id": r.choice([None, "job-10", 7]),
               "rank": r.choice([0, "0", 1.0, None, [0], "a"]), "local_rank": 0, "world_size": r.choice([1, 0, "2"]), "source": r.choice(["gpumemprof diagnose", ""])}
    if r.random() < 0.2:
        for k in r.sample(list(session), 2):
            del session[k]
    manifest = {"schema_version": 2, "bundle_name": name, "risk_detected": r.choice([True, False, None, "yes"]),
                "exit_code": r.choice([0, 2, True, 1.0, None]), "native_history_enabled": r.choice([True, False, None]),
                "session_status": r.choice(["completed", "interrupted", None]), "session": session if r.random() < 0.85 else r.choice(["x", [1]])}
    kind = r.choice(["ok", "ok", "ok", "broken"])
    (d / "manifest.json").write_text(json.dumps(manifest) if kind == "ok" else "{not json")
    if r.random() < 0.8:
        summary = {"allocated_bytes": r.randrange(2**34), "reserved_bytes": r.choice([r.randrange(2**34), "n/a"]),
                   "peak_bytes": r.randrange(2**34), "total_bytes": r.choice([0, 85899345920]), "utilization_ratio": r.random(),
                   "fragmentation_ratio": r.choice([r.random(), None]), "num_ooms": r.choice([0, 3, True]),
                   "risk_flags": r.choice([{"oom_occurred": False, "high_utilization": True, "fragmentation_warning": "x"}, None, [1]]),
                   "suggestions": r.choice([[], ["Reduce batch size"], ["Call torch.cuda.empty_cache() <rarely>", 3, 2.5, None], "nope"])}
        (d / "diagnostic_summary.json").write_text(json.dumps(summary) if r.random() < 0.9 else json.dumps([summary]))
    (d / "environment.json").write_text('{"python": "3.11"}')
    (d / "telemetry_timeline.json").write_text('{"events": []}')
    if r.random() < 0.4:
        attribution_files(r, d, r.random() < 0.3)
    cfg["artifact_dir"] = name
    return cfg


def main(out_dir, start, count):
    for seed in range(start, start + count):
        r = random.Random(seed)
        case = Path(out_dir) / ("case-%04d" % seed)
        if case.exists():
            shutil.rmtree(case)
        inp = case / "input"
        inp.mkdir(parents=True)
        cfg = tracking_case(r, inp) if r.random() < 0.6 else diagnose_case(r, inp)
        (inp / "config.json").write_text(json.dumps(cfg, indent=2))


main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
