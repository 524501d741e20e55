"""fake_gcs: a GCS JSON API server that gcsfs and google-cloud-storage really use.

>>> from fake_gcs import FakeGCSServer
>>> with FakeGCSServer(port=0) as server:
...     server.url.startswith("http://")
True

Run ``python -m fake_gcs --port 4443`` and export the printed ``STORAGE_EMULATOR_HOST``.
"""

from fake_gcs.app import Limits
from fake_gcs.knobs import Knobs
from fake_gcs.env import pointed_at
from fake_gcs.server import FakeGCSServer

__all__ = ["FakeGCSServer", "Knobs", "Limits", "pointed_at"]
