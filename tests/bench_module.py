"""Benchmark scripts imported by the tests that check their parts. `benchmarks/pipeline.py` is
named as the issue names it, and so is the `pipeline` package (the Spark source): a plain
`import pipeline` with benchmarks/ on the path would get whichever was imported first, so the
script is loaded under a name of its own."""
from __future__ import annotations

import importlib.util
import os
import sys

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def load(name: str):
    """benchmarks/<name>.py as the module `benchmarks_<name>` (its helpers on the path)."""
    if BENCHMARKS not in sys.path:
        sys.path.insert(0, BENCHMARKS)
    module_name = f"benchmarks_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
