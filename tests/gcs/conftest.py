"""Fixtures for the fake_gcs tests: a server per test, and real gcsfs / google-cloud-storage clients."""

from __future__ import annotations

import pytest

from fake_gcs import FakeGCSServer
from fake_gcs.pytest_plugin import fake_gcs_server, pointed_at  # noqa: F401 - the fixture
from tests.gcs.helpers import BUCKET, Raw


@pytest.fixture
def gcsfs_fs(fake_gcs_server):
    """A gcsfs filesystem (core class: no gRPC bucket-type probe) on the test server."""
    import gcsfs.core

    fs = gcsfs.core.GCSFileSystem(token="anon", endpoint_url=fake_gcs_server.url, skip_instance_cache=True)
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    yield fs
    gcsfs.core.GCSFileSystem.clear_instance_cache()


@pytest.fixture
def gcs_client(fake_gcs_server):
    """A google-cloud-storage client on the test server."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="test-project", credentials=AnonymousCredentials())


@pytest.fixture
def gcs_bucket(gcs_client):
    return gcs_client.create_bucket(BUCKET)


@pytest.fixture
def raw(fake_gcs_server):
    """Raw HTTP access to the test server, with bucket ``BUCKET`` created."""
    client = Raw(fake_gcs_server.url)
    status, _, _ = client.json("POST", "/storage/v1/b?project=p", {"name": BUCKET})
    assert status == 200
    yield client
    client.close()


@pytest.fixture
def disk_server(tmp_path):
    """A server with an on-disk backend under ``tmp_path/data``."""
    data_dir = tmp_path / "data"
    with FakeGCSServer(port=0, data_dir=data_dir) as server, pointed_at(server):
        yield server
