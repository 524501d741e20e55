"""``tpudata bench NAME``: run a benchmark script of the source tree.

Benchmarks are not library code: they write workloads, start servers and import peers. They live
in ``tools/`` and ``benchmarks/`` of a source checkout; this command finds and runs them (in this
process, so options and output are the script's own) when tpudata is installed from a checkout
(``pip install -e .``, as ``make`` does).
"""

from __future__ import annotations

import importlib.util
import os

import tpudata
from tpudata.errors import TpuDataError

# name -> (script relative to the checkout root, help)
SCRIPTS = {
    "infeed": ("tools/bench_infeed.py", "input-bound %% of the TPU executor, local disk vs fake GCS"),
}


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(tpudata.__file__)))


def load(name: str):
    """Import benchmark ``name``'s script as a module; None when this is no source checkout."""
    path = os.path.join(_root(), SCRIPTS[name][0])
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location(f"tpudata_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def register(sub) -> None:
    bench = sub.add_parser("bench", help="run a benchmark of the source tree (tools/, benchmarks/)",
                           description=__doc__)
    kinds = bench.add_subparsers(dest="bench", metavar="BENCHMARK")
    kinds.required = True
    for name, (script, text) in SCRIPTS.items():
        module = load(name)
        if module is None:
            p = kinds.add_parser(name, help=f"{text} (needs a source checkout)")
            p.set_defaults(func=_missing(name, script))
        else:
            p = kinds.add_parser(name, help=text, description=module.__doc__)
            module.add_arguments(p)
            p.set_defaults(func=module.cmd_infeed)


def _missing(name: str, script: str):
    def run(args) -> int:
        raise TpuDataError(
            f"benchmark {name!r} is the script {script} of tpudata's source tree, which this "
            f"installation ({_root()}) does not have: run it from a checkout "
            f"(pip install -e . then tpudata bench {name}, or python {script})")
    return run
