"""gs:// fails fast and clearly: an unreachable endpoint, a missing bucket or missing credentials
give one StorageError naming the URL and what to do, within seconds, from every entry point.

Network safety: only endpoints on 127.0.0.1 are used (a closed port for "unreachable", fake_gcs
for "missing bucket"); credential discovery runs in a subprocess whose environment points the
GCE metadata server at 127.0.0.1:9, so nothing leaves the machine.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

import tpudata
from fake_gcs import FakeGCSServer
from fake_gcs.pytest_plugin import clear_fsspec_cache, fake_gcs_server  # noqa: F401 - fixture
from tpudata import _gcs, storage
from tpudata.errors import StorageError

FAST = 10.0  # seconds: the bound (gcsfs alone retries for ~50 s)
SAFE_AUTH_ENV = {  # google-auth must never probe a real metadata server
    "NO_GCE_CHECK": "true",  # google-auth and gcsfs compare with lower-case "true"
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _subprocess_env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST")}
    env.update(SAFE_AUTH_ENV)
    env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
               GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false", PYTHONPATH=os.getcwd())
    env.update(extra)
    return env


@pytest.fixture
def unreachable(monkeypatch):
    """STORAGE_EMULATOR_HOST aimed at a closed port on 127.0.0.1 (which a server of an earlier
    test may have had: the process would remember it reachable)."""
    monkeypatch.setattr(_gcs, "_reachable", set())
    host = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    clear_fsspec_cache()
    yield host
    clear_fsspec_cache()


ENTRY_POINTS = {
    "list_files": lambda url: tpudata.Dataset.list_files(url),
    "read_records": lambda url: list(tpudata.read_records(url)),
    "TFRecordDataset": lambda url: list(tpudata.TFRecordDataset(url)),
    "open_read": lambda url: storage.open_read(url.replace("*", "0")),
    "open_atomic": lambda url: storage.open_atomic(url.replace("*", "0")).close(),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_unreachable_endpoint_fails_fast_with_one_clear_error(unreachable, entry, timed):
    url = "gs://bucket/train-*"
    start = time.monotonic()
    with pytest.raises(StorageError) as info:
        ENTRY_POINTS[entry](url)
    if timed:
        assert time.monotonic() - start < FAST
    err = info.value
    assert err.url == url.replace("*", "0") if entry.startswith("open") else err.url == url
    assert repr(err.url) in str(err) and unreachable in str(err)
    assert "STORAGE_EMULATOR_HOST" in str(err) and "Connection refused" in str(err)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_missing_bucket_is_named(fake_gcs_server, entry, timed):
    url = "gs://no-such-bucket/train-*"
    start = time.monotonic()
    with pytest.raises(StorageError) as info:
        ENTRY_POINTS[entry](url)
    if timed:
        assert time.monotonic() - start < FAST
    message = str(info.value)
    assert "bucket 'no-such-bucket' does not exist" in message
    assert "create it" in message and repr(info.value.url) in message


def test_missing_object_in_an_existing_bucket_stays_file_not_found(fake_gcs_server):
    storage.gcs_filesystem().mkdir("real-bucket")
    with pytest.raises(FileNotFoundError) as info:
        storage.open_read("gs://real-bucket/absent")
    assert not isinstance(info.value, StorageError)
    with pytest.raises(StorageError, match="no files match"):
        tpudata.Dataset.list_files("gs://real-bucket/absent-*")
    assert storage.glob("gs://real-bucket/absent-*") == []


def test_a_failed_check_is_not_remembered(unreachable):
    """An emulator started after a failed attempt is used: only successes are cached."""
    port = int(unreachable.rsplit(":", 1)[1])
    with pytest.raises(StorageError):
        storage.glob("gs://bucket/*")
    with FakeGCSServer(port=port) as server:
        storage.gcs_filesystem().mkdir("bucket")
        storage.open_atomic("gs://bucket/a").close()
        assert storage.glob("gs://bucket/*") == ["gs://bucket/a"]
        assert server.url.endswith(f":{port}")


def _cli(args, env, timeout=60):
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tpudata.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def test_cli_unreachable_endpoint_prints_one_line(tmp_path, timed):
    host = f"127.0.0.1:{_closed_port()}"
    proc, took = _cli(["count", "gs://b/x*"], _subprocess_env(tmp_path, STORAGE_EMULATOR_HOST=host))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tpudata count: cannot reach Google Cloud Storage")
    assert "'gs://b/x*'" in lines[0] and host in lines[0]
    if timed:
        assert took < FAST + 5  # includes starting the interpreter


def test_cli_missing_bucket_prints_one_line(tmp_path, fake_gcs_server):
    env = _subprocess_env(tmp_path, STORAGE_EMULATOR_HOST=fake_gcs_server.url)
    proc, _ = _cli(["count", "gs://nobucket/x*"], env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "tpudata count: bucket 'nobucket' does not exist (for 'gs://nobucket/x*'): create it "
        "(`gcloud storage buckets create gs://nobucket`; on fake_gcs: `python -m fake_gcs "
        "--bucket nobucket`) or fix the URL"]


CREDENTIALS_SCRIPT = """
import os, sys
from tpudata import _gcs, storage
from tpudata.errors import StorageError
print(_gcs.local_credentials_note())
token, note = _gcs.default_token()
print(token)
print(note)
try:
    storage.glob("gs://b/x*", endpoint_url=sys.argv[1], token="google_default")
except StorageError as exc:
    print("ERROR", exc.url, exc)
"""


def test_no_credentials_says_how_to_log_in(tmp_path, fake_gcs_server):
    """No ADC file, no GOOGLE_APPLICATION_CREDENTIALS, not on GCE (metadata on 127.0.0.1:9)."""
    env = _subprocess_env(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CREDENTIALS_SCRIPT, fake_gcs_server.url],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    hint, token, note, error = proc.stdout.strip().splitlines()
    assert hint.startswith("no application-default credentials found either")
    assert hint.endswith(_gcs.LOGIN_ADVICE)
    assert token == "anon"  # anonymous access to public buckets, like TensorFlow's GCS client
    assert "no Google credentials found" in note
    assert "gcloud auth application-default login" in note
    assert error.startswith("ERROR gs://b/x* cannot use Google credentials for 'gs://b/x*'")
    assert "gcloud auth application-default login" in error


def test_denied_errors_name_the_url_and_the_login():
    exc = OSError("Forbidden: b/o\nAnonymous caller does not have storage.objects.get access")
    assert _gcs.is_denied(exc) and not _gcs.is_denied(FileNotFoundError("b/o"))
    from gcsfs.retry import HttpError

    assert _gcs.is_denied(HttpError({"code": 401, "message": "Anonymous caller"}))
    assert not _gcs.is_denied(HttpError({"code": 503, "message": "backend error"}))
    err = _gcs.denied_error("gs://b/o", exc, "no credentials were used: " + _gcs.LOGIN_ADVICE)
    assert err.url == "gs://b/o"
    assert "access denied to 'gs://b/o' (Forbidden: b/o Anonymous caller" in str(err)
    assert str(err).endswith(_gcs.LOGIN_ADVICE)


def test_storage_error_pickles_with_its_url():
    import pickle

    err = pickle.loads(pickle.dumps(StorageError("cannot", url="gs://b/x")))
    assert (str(err), err.url) == ("cannot", "gs://b/x")


def test_unreachable_real_gcs_message_says_emulator_and_login(monkeypatch):
    """The advice for the default endpoint (checked here on a closed 127.0.0.1 port)."""
    # a server of an earlier test may have had this port: the process remembers it reachable
    monkeypatch.setattr(_gcs, "_reachable", set())
    endpoint = f"https://127.0.0.1:{_closed_port()}"
    note = "no Google credentials found (x): " + _gcs.LOGIN_ADVICE
    with pytest.raises(StorageError) as info:
        _gcs.check_endpoint(endpoint, "gs://b/x", note=note)
    message = str(info.value)
    assert message.startswith(f"cannot reach Google Cloud Storage at {endpoint} for 'gs://b/x'")
    assert "check the network" in message and "STORAGE_EMULATOR_HOST=" in message
    assert message.endswith(f"({note})")


class _Forbidden:
    """A real HTTP server on 127.0.0.1 that answers every request 403, as GCS answers an
    anonymous caller on a private bucket; counts the requests it gets."""

    def __init__(self):
        import http.server
        import threading

        outer = self
        self.requests = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def _deny(self):
                outer.requests += 1
                body = (b'{"error": {"code": 403, "message": "Anonymous caller does not have '
                        b'storage.objects.get access"}}')
                self.send_response(403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _deny

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def forbidden(monkeypatch):
    server = _Forbidden()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    clear_fsspec_cache()
    yield server
    clear_fsspec_cache()
    server.close()


@pytest.mark.parametrize("entry", ["open_read", "read_records", "TFRecordDataset"])
def test_access_denied_is_one_error_without_retries(forbidden, entry, timed):
    url = "gs://private/train-*"
    start = time.monotonic()
    with pytest.raises(StorageError) as info:
        ENTRY_POINTS[entry](url.replace("*", "0") if entry != "read_records" else url)
    if timed:
        assert time.monotonic() - start < FAST
    message = str(info.value)
    assert message.startswith("access denied to 'gs://private/train-")
    assert "Anonymous caller" in message
    assert "no credentials were used" in message
    assert "gcloud auth application-default login" in message
    assert forbidden.requests <= 3  # no retry loop (the reader retries transient errors 10 times)


def test_own_session_settings_skip_the_direct_check(unreachable):
    """With session_kwargs (e.g. a proxy) the TCP check is skipped: gcsfs decides how to connect."""
    fs, path = storage.url_to_fs("gs://bucket/a", session_kwargs={"trust_env": False})
    assert path == "bucket/a" and fs._endpoint == f"http://{unreachable}"
    with pytest.raises(StorageError, match="cannot reach"):
        storage.url_to_fs("gs://bucket/a")


def test_credentials_file_silences_the_hint(tmp_path, monkeypatch):
    """Local checks only: GOOGLE_APPLICATION_CREDENTIALS or gcloud's ADC file count as found."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    assert "gcloud auth application-default login" in _gcs.local_credentials_note()
    (tmp_path / "application_default_credentials.json").write_text("{}")
    assert _gcs.local_credentials_note() is None
    (tmp_path / "application_default_credentials.json").unlink()
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    assert _gcs.local_credentials_note() is None


def test_connect_bounds_resolution_and_connection():
    with socket.create_server(("127.0.0.1", 0)) as server:
        _gcs._connect("127.0.0.1", server.getsockname()[1], 2.0)  # answers: no error
    with pytest.raises(ConnectionRefusedError):
        _gcs._connect("127.0.0.1", _closed_port(), 2.0)
