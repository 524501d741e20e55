"""tpudata rows as a user gets them and tuned, each measured in its own process.

A benchmark shows tpudata first as a user gets it (glibc malloc as it comes: nothing tuned, and
``TPUDATA_MALLOC_TUNING=0`` so nothing tunes it behind the measurement) and then tuned
(``tpudata.tune_malloc()`` called first), each in a fresh child process of the benchmark script
run with ``--child default`` or ``--child tuned``; the child prints its measurements as JSON on
its last line. The parent measures no tpudata row: it tunes itself (:func:`tune_parent`) only so
that the peers it starts (TensorFlow) get the tuned settings, as before.

    ap = argparse.ArgumentParser(...)
    bench_common.add_child_argument(ap)
    args = ap.parse_args(argv)
    if args.child:
        bench_common.start_child(args.child)
        return bench_common.child_result(measure(args))
    bench_common.tune_parent()
    ours, peers = bench_common.run_rows(__file__, argv_for_child, rounds=2, peer=run_peer)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Callable

import tpudata
from tpudata import _accel

SETTINGS = ("default", "tuned")  # the order rows are measured and printed in
LABELS = {"default": "as a user gets it", "tuned": "tune_malloc()"}


def add_child_argument(ap: argparse.ArgumentParser) -> None:
    """The hidden ``--child default|tuned`` that makes the script measure one setting's rows."""
    ap.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)


def start_child(setting: str) -> None:
    """In a child: tune when the setting says so (the default child changes nothing)."""
    if setting == "tuned":
        tpudata.tune_malloc()


def child_result(result: Any) -> int:
    """In a child: hand ``result`` to the parent (JSON, the last line of stdout)."""
    print(json.dumps(result), flush=True)
    return 0


def tune_parent() -> None:
    """In the parent, which measures no tpudata row: tune, so that peers started with
    :func:`peer_environ` run with the same glibc settings as the tuned row."""
    _accel.ensure_allocator_tuned()


def peer_environ() -> dict[str, str]:
    """The environment for a peer process (TensorFlow): this one's, with the tuned settings."""
    return dict(os.environ, **_accel.allocator_environ())


def run_child(script: str, argv: list[str], setting: str, relay: bool = False) -> Any:
    """Run ``script argv --child setting`` in a fresh interpreter and return its JSON result;
    ``relay`` prints the child's other output lines, labelled with the setting."""
    env = dict(os.environ, TPUDATA_MALLOC_TUNING="0")  # "default": glibc as it comes
    proc = subprocess.run([sys.executable, os.path.abspath(script), *argv, "--child", setting],
                          capture_output=True, text=True, check=False, env=env)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"{os.path.basename(script)} --child {setting} exited with "
                           f"{proc.returncode}")
    lines = proc.stdout.strip().splitlines()
    if relay:
        for line in lines[:-1]:
            print(f"  [{LABELS[setting]}] {line}", flush=True)
    return json.loads(lines[-1])


def run_rows(script: str, argv: list[str], rounds: int = 2,
             peer: Callable[[int], Any] | None = None,
             relay: bool = False) -> tuple[dict[str, list], list]:
    """``rounds`` rounds, each running a child per setting (default first, then tuned) and then
    ``peer(round)`` (None: no peer that round), so that a machine whose speed drifts affects
    every contender alike. Returns ``({setting: [child result per round]}, [peer results])``."""
    ours: dict[str, list] = {s: [] for s in SETTINGS}
    theirs = []
    for rnd in range(rounds):
        for setting in SETTINGS:
            ours[setting].append(run_child(script, argv, setting, relay))
        if peer is not None:
            res = peer(rnd)
            if res is not None:
                theirs.append(res)
    return ours, theirs


def label(name: str, setting: str) -> str:
    """A row's name with its setting: ``"tpudata ..., as a user gets it"``."""
    return f"{name}, {LABELS[setting]}"
