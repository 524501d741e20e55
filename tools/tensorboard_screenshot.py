"""Screenshot of the demo's curves in a real TensorBoard (for the README).

1. run `tools/demo.py` (unless --logdir is given) and keep its event files,
2. start `tensorboard --logdir ... --host 127.0.0.1 --port 0` (a free port),
3. load its scalars page in headless Chromium and save a screenshot,
4. shrink it to a small palette PNG (docs/tensorboard.png by default).

Needs `pip install tensorboard` and a Chromium (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no Chromium found: apt-get install chromium")


def start_tensorboard(logdir: str) -> tuple[subprocess.Popen, str]:
    """A TensorBoard on 127.0.0.1 and a free port; returns the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1",
         "--port", "0", "--reload_interval", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    seen = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if match:
            return proc, match.group(1)
    proc.kill()
    sys.exit("TensorBoard did not start:\n" + "".join(seen[-20:]))


def wait_for_runs(url: str, timeout: float = 60) -> list:
    """Wait until TensorBoard has loaded the runs (its /data/runs endpoint lists them)."""
    import json

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "data/runs", timeout=5) as r:
                runs = json.loads(r.read())
            if runs:
                return runs
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"TensorBoard at {url} loaded no runs")


def screenshot(chromium: str, url: str, out: str, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tpudata-chromium-") as profile:
        subprocess.run(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "--virtual-time-budget=20000",
             f"--screenshot={out}", url],
            check=True, capture_output=True, timeout=180)


def shrink(path: str, out: str, width: int, colours: int) -> None:
    """Scale to ``width`` pixels and store as a palette PNG (a few tens of kB)."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    if img.width > width:
        img = img.resize((width, round(img.height * width / img.width)), Image.LANCZOS)
    img.quantize(colours, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logdir", default=None, help="event files to show (default: run the demo)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "tensorboard.png"))
    ap.add_argument("--tags",
                    default="^(loss|examples/sec|infeed/input_bound_percent|infeed/wait_seconds)$",
                    help="regular expression of the scalar tags to show")
    ap.add_argument("--window", default="1400x800", help="browser window, WIDTHxHEIGHT")
    ap.add_argument("--width", type=int, default=1000, help="width of the saved PNG")
    ap.add_argument("--colours", type=int, default=64)
    args = ap.parse_args(argv)
    chromium = find_chromium()
    work = tempfile.mkdtemp(prefix="tpudata-tb-shot-")
    try:
        logdir = args.logdir
        if logdir is None:
            logdir = os.path.join(work, "tensorboard")
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "demo.py"),
                            "--workdir", work, "--tensorboard-dir", logdir], check=True)
        proc, url = start_tensorboard(logdir)
        try:
            runs = wait_for_runs(url)
            print(f"TensorBoard at {url} with runs {runs}")
            page = f"{url}?darkMode=false#scalars&tagFilter={urllib.request.quote(args.tags)}"
            raw = os.path.join(work, "raw.png")
            width, height = (int(v) for v in args.window.split("x"))
            screenshot(chromium, page, raw, width, height)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        shrink(raw, args.out, args.width, args.colours)
        print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e3:.0f} kB)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
