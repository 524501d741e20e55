"""Point the process's environment (STORAGE_EMULATOR_HOST, gcsfs settings) at a server.

Not pytest-specific: the demo and the benchmarks use it too.
"""

from __future__ import annotations

import logging
import os

from fake_gcs.server import FakeGCSServer

logger = logging.getLogger(__name__)
ENV_VARS = ("STORAGE_EMULATOR_HOST", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")


def clear_fsspec_cache() -> None:
    """Forget cached gcsfs instances (they hold sessions to a previous server)."""
    try:
        import fsspec
    except ImportError:
        return
    for proto in ("gs", "gcs"):
        try:
            fsspec.get_filesystem_class(proto).clear_instance_cache()
        except (ImportError, ValueError):
            pass
    try:
        import gcsfs.core

        gcsfs.core.GCSFileSystem.clear_instance_cache()
    except ImportError:
        pass


class pointed_at:
    """Context manager: environment variables aimed at ``server``, restored on exit."""

    def __init__(self, server: FakeGCSServer) -> None:
        self.server = server
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> FakeGCSServer:
        self._saved = {k: os.environ.get(k) for k in ENV_VARS}
        os.environ["STORAGE_EMULATOR_HOST"] = self.server.url
        os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
        clear_fsspec_cache()
        return self.server

    def __exit__(self, *exc) -> None:
        clear_fsspec_cache()
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
