"""Subcommands of the ``tpudata`` CLI; each module exposes ``register(subparsers)``."""

from tpudata.commands import bench, convert, records

COMMAND_MODULES = [records, convert, bench]
