"""The ``tpudata`` command line.

    tpudata count PATH_OR_GLOB...        records per file and in total
    tpudata verify [--all] PATH...       check every CRC; non-zero exit with file:offset of damage
    tpudata head [-n 3] PATH...          print the first records as decoded Examples
    tpudata index PATH...                write DALI-style .idx files next to the data

Each group of commands lives in a module of :mod:`tpudata.commands` exposing
``register(subparsers)``; the parser it adds sets ``func(args) -> exit code``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tpudata import __version__, _accel
from tpudata.commands import COMMAND_MODULES
from tpudata.errors import StorageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpudata", description="TFRecord tools: count, verify, inspect, index, convert.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps --version on one line
    )
    parser.add_argument("--version", action="version",
                        version=f"tpudata {__version__} ({_accel.describe()})")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    _accel.ensure_allocator_tuned()  # the command line owns its process (TPUDATA_MALLOC_TUNING=0: off)
    try:
        return int(args.func(args) or 0)
    except StorageError as exc:
        print(f"tpudata {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
