"""Subcommands of the ``tpudata`` CLI; each module exposes ``register(subparsers)``."""

from tpudata.commands import records

COMMAND_MODULES = [records]
