"""Runs the Python Stormlog's `gpumemprof` CLI (`stormlog.cli.main`) from a source checkout, for the
benches that time it side by side (`STORMLOG_BENCH_REFERENCE="python3 bench/python-reference.py"`).

Its source is not installable here (PyPI is unreachable): point STORMLOG_REFERENCE_SOURCE at a checkout
whose `stormlog/` package reads schema v3 sinks (`load_telemetry_sessions`). torch, psutil and pynvml are
imported by modules `analyze` never calls: where they are missing they are stood in for by empty modules.
Loaded by another script (`runpy.run_path`, as scripts/python-interop/analysis_variants.py does), it only
sets up the path and the stand-ins.
"""
import os
import sys
import types

source = os.environ.get("STORMLOG_REFERENCE_SOURCE")
if not source or not os.path.isdir(os.path.join(source, "stormlog")):
    sys.exit("python-reference.py: set STORMLOG_REFERENCE_SOURCE to a checkout holding the stormlog/ package")
sys.path.insert(0, source)


class _Absent(types.ModuleType):
    """A module that is not installed: any attribute is another such module, or an exception class."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            value = type(name, (Exception,), {})
        else:
            value = _Absent(f"{self.__name__}.{name}")
            sys.modules[value.__name__] = value
        setattr(self, name, value)
        return value

    def __call__(self, *args, **kwargs):
        return self


for name in ("torch", "torch.cuda", "psutil", "pynvml"):
    try:
        __import__(name)
    except ImportError:
        sys.modules[name] = _Absent(name)

# Run as a script: the CLI. Loaded by another script (runpy): the stand-ins and the path only.
if __name__ == "__main__":
    from stormlog.cli import main

    sys.exit(main())
