"""``build_shards`` from a script without an ``if __name__ == "__main__":`` guard explains the
guard instead of dying with a bare ``BrokenProcessPool`` (real scripts, run in subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tpudata.errors import MainGuardError
from tpudata.shards.executors import check_main_guard

HEADER = """\
import tpudata

def enc(i):
    return tpudata.encode_example({"x": i})

"""


def _run(tmp_path, body: str, name: str = "script.py"):
    script = tmp_path / name
    script.write_text(HEADER + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    return script, proc


def test_unguarded_top_level_build_explains_the_guard(tmp_path):
    script, proc = _run(tmp_path, """\
        out = tpudata.build_shards(range(20), enc, "out", "t", num_shards=4, workers=2)
        print("built", out.records_written)
        """)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tpudata.errors.MainGuardError: {script}, line 6: ")
    assert 'Put the call under `if __name__ == "__main__":`' in last
    assert "BrokenProcessPool" not in proc.stderr.replace("with BrokenProcessPool", "")
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_unguarded_call_through_a_function_is_found(tmp_path):
    script, proc = _run(tmp_path, """\
        def main():
            return tpudata.build_shards(range(20), enc, "out", "t", num_shards=4, workers=2)

        main()
        """)
    assert proc.returncode == 1
    assert f"MainGuardError: {script}, line 9: " in proc.stderr


@pytest.mark.parametrize("guard", ['if __name__ == "__main__":', "if '__main__' == __name__:"])
def test_guarded_script_builds_with_worker_processes(tmp_path, guard):
    _, proc = _run(tmp_path, f"""\
        def main():
            out = tpudata.build_shards(range(20), enc, "out", "t", num_shards=4, workers=2)
            print("built", out.records_written, out.written)

        {guard}
            main()
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["built", "20", "4"]


def test_one_worker_needs_no_guard(tmp_path):
    _, proc = _run(tmp_path, """\
        out = tpudata.build_shards(range(20), enc, "out", "t", num_shards=4, workers=1)
        print("built", out.records_written)
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["built", "20"]


def test_error_pickles_and_pytest_is_not_flagged():
    check_main_guard()  # pytest's own entry point has its guard
    import pickle

    err = pickle.loads(pickle.dumps(MainGuardError("m", script="s.py", line=3)))
    assert (str(err), err.script, err.line) == ("m", "s.py", 3)
