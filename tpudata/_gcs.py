"""Fail-fast checks for ``gs://``: endpoint reachability, credentials, missing buckets.

gcsfs retries connection errors for about a minute and then raises a deep aiohttp traceback;
these checks turn the mistakes a user can fix into one :class:`~tpudata.errors.StorageError`
that names the URL and what to do, within seconds:

- the endpoint (``STORAGE_EMULATOR_HOST``, ``endpoint_url`` or ``storage.googleapis.com``) gets
  one TCP connect with a short timeout, once per endpoint and process (:func:`check_endpoint`);
  a DNS failure, a refused connection or a timeout fails at once. Transient errors later on a
  reachable endpoint are still retried by gcsfs.
- Google credentials are discovered once per process (:func:`default_token`); none found means
  anonymous access (public buckets), and access denied then says how to log in.
- a ``404`` on an object or an empty listing asks for the bucket (:func:`bucket_missing`), so a
  missing bucket is reported as such.

Nothing here changes ``os.environ``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from urllib.parse import urlsplit

from tpudata.errors import StorageError

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
CONNECT_TIMEOUT = 5.0
SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"
EMULATOR_ADVICE = ("to use a local emulator instead, start one (e.g. `python -m fake_gcs "
                   "--port 4443`) and set STORAGE_EMULATOR_HOST=127.0.0.1:4443")
LOGIN_ADVICE = ("run `gcloud auth application-default login` (or set "
                "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file)")

_lock = threading.Lock()
_reachable: set[tuple[str, int]] = set()
_token: dict[str, tuple[str, str | None]] = {}


def _where(url: str | None) -> str:
    return f" for {url!r}" if url else ""


def _connect(host: str, port: int, timeout: float) -> None:
    """Open and close one TCP connection; name resolution is bounded by ``timeout`` too
    (``getaddrinfo`` has no timeout of its own: it runs in a daemon thread)."""
    deadline = time.monotonic() + timeout
    found: dict = {}

    def resolve() -> None:
        try:
            found["addrs"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            found["error"] = exc

    worker = threading.Thread(target=resolve, name="tpudata-gcs-resolve", daemon=True)
    worker.start()
    worker.join(timeout)
    if "error" in found:
        raise found["error"]
    if "addrs" not in found:
        raise socket.gaierror(socket.EAI_AGAIN, f"no DNS answer within {timeout:g} s")
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in found["addrs"]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer from {host}:{port} within {timeout:g} s")
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left)
            sock.connect(address)
            return
        except OSError as exc:
            error = exc
        finally:
            sock.close()
    raise error


def local_credentials_note() -> str | None:
    """A note when neither GOOGLE_APPLICATION_CREDENTIALS nor gcloud's application-default
    credentials file exists (local checks only: no network, no metadata server)."""
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return None
    try:  # where gcloud writes it (CLOUDSDK_CONFIG, ~/.config/gcloud, %APPDATA%\gcloud)
        from google.auth._cloud_sdk import get_application_default_credentials_path as adc_path

        path = adc_path()
    except ImportError:  # pragma: no cover - google-auth comes with gcsfs
        path = os.path.join(os.environ.get("CLOUDSDK_CONFIG") or os.path.join(
            os.path.expanduser("~"), ".config", "gcloud"), "application_default_credentials.json")
    if os.path.exists(path):
        return None
    return f"no application-default credentials found either: outside GCE, {LOGIN_ADVICE}"


def check_endpoint(endpoint: str, url: str | None = None, emulator: bool = False,
                   timeout: float = CONNECT_TIMEOUT, note: str | None = None) -> None:
    """Raise :class:`StorageError` unless a TCP connection to ``endpoint`` opens within ``timeout``.

    A success is remembered for the process; a failure is not (the server may start later).
    ``emulator`` chooses the advice; ``note`` (e.g. that no credentials were found) is appended.
    """
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    host = parts.hostname or "localhost"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if (host, port) in _reachable:
        return
    try:
        _connect(host, port, timeout)
    except socket.gaierror as exc:
        reason = f"cannot resolve host {host!r} ({exc.strerror or exc})"
    except (socket.timeout, TimeoutError):
        reason = f"no answer from {host}:{port} within {timeout:g} s"
    except OSError as exc:
        reason = f"cannot connect to {host}:{port} ({exc.strerror or exc})"
    else:
        with _lock:
            _reachable.add((host, port))
        return
    if emulator:
        advice = (f"is the GCS emulator running? Start it there, or point STORAGE_EMULATOR_HOST "
                  f"(or endpoint_url) at the one that is")
    else:
        advice = f"check the network; {EMULATOR_ADVICE}"
    message = f"cannot reach Google Cloud Storage at {endpoint}{_where(url)}: {reason}; {advice}"
    if note:
        message += f" ({note})"
    raise StorageError(message, url=url)


def default_token(url: str | None = None, required: bool = False) -> tuple[str, str | None]:
    """``(gcsfs token, note)`` for real GCS when the caller gave no token.

    ``("google_default", None)`` when Google's application-default credentials are found; else
    ``("anon", note)`` (public buckets stay readable) with a note saying how to log in. With
    ``required`` (the caller asked for ``token="google_default"``), no credentials raise
    :class:`StorageError`. Discovery runs once per process (it may ask the GCE metadata server).
    """
    with _lock:
        found = _token.get("default")
    if found is None:
        import google.auth
        import google.auth.exceptions

        try:
            google.auth.default(scopes=[SCOPE])
            found = ("google_default", None)
        except google.auth.exceptions.DefaultCredentialsError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            found = ("anon", f"no Google credentials found ({first}): {LOGIN_ADVICE}")
        with _lock:
            _token["default"] = found
    if required and found[0] != "google_default":
        raise StorageError(f"cannot use Google credentials{_where(url)}: {found[1]}", url=url)
    return found


def warn_anonymous(url: str | None, note: str) -> None:
    """Log once per process that real GCS is used without credentials."""
    with _lock:
        if _token.get("warned"):
            return
        _token["warned"] = ("", None)
    logger.warning("%s; accessing %s anonymously (public buckets only)", note, url or "gs://")


def bucket_missing(fs, path: str) -> str | None:
    """The bucket of ``path`` if the store says it does not exist (a ``404``), else ``None``."""
    bucket = path.lstrip("/").split("/", 1)[0]
    if not bucket:
        return None
    try:
        fs.call("GET", "b/{}", bucket, json_out=True)
    except FileNotFoundError:
        return bucket
    except Exception:  # no permission to read bucket metadata etc.: not proof of absence
        return None
    return None


def missing_bucket_error(bucket: str, url: str) -> StorageError:
    return StorageError(
        f"bucket {bucket!r} does not exist (for {url!r}): create it (`gcloud storage buckets "
        f"create gs://{bucket}`; on fake_gcs: `python -m fake_gcs --bucket {bucket}`) or fix the "
        f"URL", url=url)


def denied_error(url: str, exc: BaseException, note: str | None) -> StorageError:
    """Access denied (401/403) on ``url``: the message says how to get access."""
    text = str(exc).strip().splitlines()
    detail = " ".join(line.strip() for line in text if line.strip())[:300]
    advice = note or f"check that these credentials may access it, or {LOGIN_ADVICE}"
    return StorageError(f"access denied to {url!r} ({detail}): {advice}", url=url)


def is_denied(exc: BaseException) -> bool:
    """Whether ``exc`` (from gcsfs) is an authentication/permission failure."""
    if isinstance(exc, PermissionError):
        return True
    # gcsfs's HttpError has .code; aiohttp's errors .status (their .code is deprecated)
    code = exc.__dict__.get("code", getattr(exc, "status", None))
    if code in (401, 403, "401", "403"):
        return True
    return isinstance(exc, OSError) and str(exc).startswith("Forbidden")


def reset() -> None:
    """Forget reachable endpoints and discovered credentials (for tests)."""
    with _lock:
        _reachable.clear()
        _token.clear()


__all__ = ["bucket_missing", "check_endpoint", "default_token", "denied_error", "is_denied",
           "local_credentials_note", "missing_bucket_error", "reset", "warn_anonymous"]
