"""Records one W&B export case from the Python reference: runs its export on a copy of <case>/input with a
stand-in `wandb` module that records each call, and prints expected.json (the golden cases' format).

Usage: STORMLOG_PY_REF=<checkout of Bempong-Sylvester-Obese/stormlog at 973b809> python3 record_case.py <case-dir>
(standard library only; the reference's W&B export, loader and sink need nothing else).
"""
import base64, hashlib, json, math, os, shutil, sys, tempfile, types
from pathlib import Path

sys.path.insert(0, os.environ["STORMLOG_PY_REF"])

calls = []
TMP_ROOT = tempfile.gettempdir()


class Table:
    def __init__(self, columns=None, data=None):
        self.columns = list(columns or [])
        self.data = [list(r) for r in (data or [])]


class Html:
    def __init__(self, html):
        self.html = html


class LineSeries:
    def __init__(self, xs, ys, keys, title, xname):
        self.xs, self.ys, self.keys, self.title, self.xname = xs, ys, keys, title, xname


def line_series(xs, ys, keys=None, title="", xname=""):
    return LineSeries(list(xs), [list(y) for y in ys], list(keys or []), title, xname)


INPUT = None


def rel(p):
    p = str(p)
    ap = os.path.abspath(p)
    if ap.startswith(INPUT + os.sep):
        return ap[len(INPUT) + 1 :]
    parent = os.path.dirname(ap)
    if os.path.basename(parent).startswith("stormlog-wandb-"):
        return "$TMP/" + os.path.basename(ap)
    return ap


def md5b64(path):
    return base64.b64encode(hashlib.md5(Path(path).read_bytes()).digest()).decode()


class Artifact:
    def __init__(self, name, type):
        self.name, self.type = name, type
        self.adds = []
        self.entries = {}

    def add_file(self, local_path, name=None):
        self.adds.append({"op": "add_file", "source": rel(local_path), "name": name})
        self.entries[name] = {"path": name, "size": os.path.getsize(local_path), "digest": md5b64(local_path)}

    def add_dir(self, local_path, name=None):
        files = []
        for root, dirs, fs in os.walk(local_path):
            for f in fs:
                full = os.path.join(root, f)
                files.append(os.path.relpath(full, local_path).replace(os.sep, "/"))
        files.sort()
        self.adds.append({"op": "add_dir", "source": rel(local_path), "name": name, "files": files})
        for f in files:
            full = os.path.join(local_path, f)
            path = f"{name}/{f}"
            self.entries[path] = {"path": path, "size": os.path.getsize(full), "digest": md5b64(full)}


def ser(v):
    if isinstance(v, Table):
        return {"_type": "table", "columns": v.columns, "data": [[ser(c) for c in r] for r in v.data]}
    if isinstance(v, Html):
        return {"_type": "html", "html": v.html}
    if isinstance(v, LineSeries):
        f = lambda x: None if isinstance(x, float) and math.isnan(x) else x
        return {"_type": "line_series", "xs": [f(x) for x in v.xs], "ys": [[f(y) for y in ys] for ys in v.ys], "keys": v.keys, "title": v.title, "xname": v.xname}
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


class Summary:
    def update(self, payload):
        calls.append({"call": "summary.update", "payload": {k: ser(v) for k, v in payload.items()}})


class Run:
    def __init__(self):
        self.summary = Summary()

    def log(self, payload):
        calls.append({"call": "log", "payload": {k: ser(v) for k, v in payload.items()}})

    def log_artifact(self, a):
        calls.append({"call": "log_artifact", "name": a.name, "type": a.type, "adds": a.adds, "entries": sorted(a.entries.values(), key=lambda e: e["path"])})

    def finish(self):
        calls.append({"call": "finish"})


fake = types.ModuleType("wandb")
fake.run = None
fake.Table = Table
fake.Html = Html
fake.Artifact = Artifact
fake.plot = types.SimpleNamespace(line_series=line_series)


def init(**kwargs):
    calls.append({"call": "init", "kwargs": kwargs})
    return Run()


fake.init = init
sys.modules["wandb"] = fake

from stormlog._wandb.core import WandbExportConfig  # noqa: E402
from stormlog._wandb.tracking import export_tracking_run_to_wandb  # noqa: E402
from stormlog._wandb.diagnose import export_diagnose_bundle_to_wandb  # noqa: E402
from stormlog.telemetry import load_telemetry_sessions  # noqa: E402
from stormlog.telemetry_sink import read_telemetry_sink_manifest  # noqa: E402


def main(case_dir):
    global INPUT
    work = tempfile.mkdtemp(prefix="oracle-")
    INPUT = os.path.join(work, "input")
    shutil.copytree(os.path.join(case_dir, "input"), INPUT)
    before = set()
    for root, _, fs in os.walk(INPUT):
        for f in fs:
            before.add(os.path.relpath(os.path.join(root, f), INPUT))
    cfg = json.load(open(os.path.join(INPUT, "config.json")))
    w = cfg["wandb_config"]
    kwargs = {k: w[k] for k in ["enabled", "project", "entity", "mode", "run_id", "run_name", "group", "job_type"]}
    for k in ["log_tables", "log_artifacts", "log_attribution"]:
        if w.get(k) is not None:
            kwargs[k] = w[k]
    out = {"calls": calls, "raised": None}
    try:
        config = WandbExportConfig(**kwargs)
        if cfg.get("active_run"):
            fake.run = Run()
        p = lambda k: None if cfg.get(k) is None else os.path.join(INPUT, cfg[k])
        if cfg["kind"] == "diagnose":
            export_diagnose_bundle_to_wandb(config, command_name=cfg["command_name"], artifact_dir=p("artifact_dir"))
        else:
            sink = p("events_sink_dir")
            events, summary = [], None
            try:
                sessions = load_telemetry_sessions(sink)
                for s in sessions:
                    if s.summary.session_id == cfg["session_id"]:
                        events, summary = s.events, s.summary
            except Exception:
                m = read_telemetry_sink_manifest(sink)
                for s in (m.sessions if m else []):
                    if s.session_id == cfg["session_id"]:
                        summary = s
            out["loaded_event_count"] = len(events)
            stats = json.load(open(os.path.join(INPUT, "stats.json")))
            export_tracking_run_to_wandb(
                config,
                command_name=cfg["command_name"],
                session_summary=summary if cfg.get("session_summary") == "from_sink" else None,
                stats=stats,
                events=events,
                output_path=p("output_path"),
                telemetry_sink_dir=p("telemetry_sink_dir"),
                oom_dump_path=p("oom_dump_path"),
                attribution_bundle_dir=p("attribution_bundle_dir"),
            )
    except Exception as exc:  # noqa: BLE001
        out["raised"] = type(exc).__name__
    after = set()
    for root, _, fs in os.walk(INPUT):
        for f in fs:
            after.add(os.path.relpath(os.path.join(root, f), INPUT))
    out["files_written"] = sorted(after - before)
    json.dump(out, sys.stdout)
    shutil.rmtree(work)


main(sys.argv[1])
