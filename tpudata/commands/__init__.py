"""Subcommands of the ``tpudata`` CLI; each module exposes ``register(subparsers)``."""

from tpudata.commands import convert, records

COMMAND_MODULES = [records, convert]
