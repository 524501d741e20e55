"""pytest fixture ``fake_gcs_server``: a running server, with the environment pointed at it.

Enable with ``pytest_plugins = ["fake_gcs.pytest_plugin"]`` in a conftest (or ``-p
fake_gcs.pytest_plugin``). The fixture sets ``STORAGE_EMULATOR_HOST`` and
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` (gcsfs's bucket-type probe would stall ~60 s per call
against any emulator), clears fsspec's filesystem instance cache before and after, and restores
the environment when the test ends.
"""

from __future__ import annotations

import logging
from typing import Iterator

import pytest

from fake_gcs.env import clear_fsspec_cache, pointed_at
from fake_gcs.server import FakeGCSServer

logger = logging.getLogger(__name__)

__all__ = ["clear_fsspec_cache", "fake_gcs_server", "pointed_at"]


@pytest.fixture
def fake_gcs_server() -> Iterator[FakeGCSServer]:
    """A fresh in-memory fake GCS server on a free loopback port, for one test."""
    with FakeGCSServer(port=0) as server, pointed_at(server):
        yield server
