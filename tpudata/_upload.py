"""Parallel composite uploads to ``gs://``: several connections per object, atomic, resumable.

:class:`ComposedUpload` is what :func:`tpudata.storage.open_atomic` writes a ``gs://`` object
with. Bytes are gathered into parts; each part is handed to gcsfs's event loop at once and
uploaded (one multipart request, its CRC32C checked by the server) as a temporary object
``.{name}.tmp-{token}.part-NNNNN`` beside the final one, while the writer goes on filling the
next. A part goes when it reaches :data:`PART_SIZE`, or from :data:`MIN_PART` on when a
connection has nothing to do (a slow writer still keeps the link busy). At most
:data:`PARALLEL` parts of one object are in flight; a writer that gets further ahead waits for
the oldest. :meth:`ComposedUpload.close` uploads what is left (split over the connections),
then composes the parts into the final name in one request (GCS ``compose``, 32 sources at a
time: more parts are composed in a tree of temporary objects, one round trip a level) with
``deleteSourceObjects``, so the parts go in the same step, and checks the composed object's
size and CRC32C. An object smaller than one part is one request straight to its final name.

- Atomic: the final name appears only when the compose (or the single upload) succeeds,
  complete. Nothing is ever written to it in pieces.
- Memory: one writer holds at most ``(PARALLEL + 1) * PART_SIZE`` bytes of data (the parts in
  flight and the one being filled; 72 MiB by default).
- Killed: parts already uploaded stay as temporary objects (hidden names with tpudata's
  temporary marker, which no ``prefix-*`` glob matches): :func:`remove_temporaries` finds and
  deletes them (a sharded build does so when it starts and when it finishes). Aborted (an
  error in the ``with`` block, a failed upload): the parts in flight finish, then every part is
  deleted.
- Errors: 408, 429, 5xx and dropped connections are retried with exponential backoff and
  jitter (:data:`BACKOFF`); a final failure raises :class:`~tpudata.errors.StorageError` naming
  the object (and the part). A compose retried after its answer was lost (its sources are
  gone) is accepted when the object under the name has the size and CRC32C written.

Why compose rather than one resumable upload (what gcsfs does): a resumable upload's chunks go
one after the other on one connection, and gcsfs's writer waits for each, so one object moves
at one connection's speed at best. ``benchmarks/bench_gcs_write.py`` measures both against
fake_gcs at 50 ms latency and 50 MB/s per connection. Composite objects have a CRC32C but no
MD5 hash (GCS computes none for them); tpudata checks CRC32C.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import os
import random
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import quote

import crc32c as _crc32c_pkg

from tpudata import _accel
from tpudata.errors import StorageError

logger = logging.getLogger(__name__)

TEMP_MARKER = ".tmp-"  # the same marker as tpudata.storage.TEMP_MARKER (no import cycle)
PART_SIZE = 8 << 20
PARALLEL = 8
MIN_PART = 4 << 20  # a connection with nothing to do takes what is buffered from this size on
MIN_TAIL_PIECE = 1 << 20  # the last part is split over the connections down to this size
MAX_COMPOSE_SOURCES = 32  # GCS: a compose request takes 1 to 32 sources
TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
ABORT_TIMEOUT_S = 30.0
DELETE_CONCURRENCY = 16


@dataclass(frozen=True)
class Backoff:
    """Truncated exponential backoff with jitter: retry ``n`` (0-based) waits
    ``min(maximum, initial * multiplier**n)`` times ``U(0.5, 1)``; ``attempts`` tries in all."""

    initial: float = 1.0
    multiplier: float = 2.0
    maximum: float = 32.0
    attempts: int = 8

    def delay(self, retry: int) -> float:
        return min(self.maximum, self.initial * self.multiplier ** retry) * random.uniform(0.5, 1.0)


BACKOFF = Backoff()


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {raw!r}") from None


def upload_settings(parallel: int | None = None, part_size: int | None = None) -> tuple[int, int]:
    """``(parallel, part_size)``: the arguments, else ``TPUDATA_GCS_UPLOAD_PARALLEL`` and
    ``TPUDATA_GCS_UPLOAD_PART_MIB`` from the environment (they reach spawned build workers), else
    :data:`PARALLEL` and :data:`PART_SIZE`. ``parallel=0`` turns composite uploads off (gcsfs's
    own resumable upload, one chunk after the other)."""
    if parallel is None:
        parallel = _env_int("TPUDATA_GCS_UPLOAD_PARALLEL", PARALLEL)
    if part_size is None:
        part_size = _env_int("TPUDATA_GCS_UPLOAD_PART_MIB", PART_SIZE >> 20) << 20
    if parallel < 0 or part_size < (256 << 10):
        raise ValueError(f"parallel must be >= 0 and part_size >= 256 KiB, not {parallel} and "
                         f"{part_size}")
    return parallel, part_size


def crc32c(data, value: int = 0) -> int:
    """CRC32C of ``data`` continuing from ``value`` (the native kernel when built)."""
    native = _accel.native
    return native.crc32c(data, value) if native is not None else _crc32c_pkg.crc32c(data, value)


# ------------------------------------------------------------------ requests
class _Transient(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"HTTP {status}: {text[:200]}")
        self.status = status


async def _send(fs, method: str, url: str, what: str, *, params=None, headers=None, data=None,
                json_body=None, recover=None) -> tuple[int, bytes]:
    """One JSON-API request on gcsfs's session (its credentials, endpoint and session options),
    retried on transient failures per :data:`BACKOFF`. A 404 on a retry is first offered to
    ``recover`` (an earlier try may have done the work and lost its answer); what it returns,
    when not ``None``, is the result. ``data`` may be a function that makes the body afresh for
    each try. Other errors raise what gcsfs raises for them."""
    from gcsfs.retry import validate_response

    policy = BACKOFF
    error: BaseException | None = None
    for attempt in range(policy.attempts):
        if attempt:
            logger.debug("%s %s: retrying after %s", method, what, error)
            await asyncio.sleep(policy.delay(attempt - 1))
        try:
            await fs._set_session()
            async with fs.session.request(
                method, url, params=fs._get_params(dict(params or {})),
                headers=fs._get_headers(headers), data=data() if callable(data) else data,
                json=json_body,
                timeout=fs.requests_timeout,
            ) as resp:
                status, body = resp.status, await resp.read()
        except (OSError, asyncio.TimeoutError) as exc:  # aiohttp's connection errors are OSErrors
            error = exc
            continue
        except Exception as exc:  # aiohttp.ClientError that is not an OSError (payload, protocol)
            import aiohttp

            if not isinstance(exc, aiohttp.ClientError):
                raise
            error = exc
            continue
        if status < 300:
            return status, body
        if status == 404 and attempt and recover is not None:
            found = await recover()
            if found is not None:
                return 200, found
        if status in TRANSIENT or (status == 401 and attempt == 0):  # 401: token refresh
            error = _Transient(status, body.decode("utf-8", "replace"))
            continue
        validate_response(status, body, what)
        raise OSError(f"{what}: HTTP {status}")  # pragma: no cover - validate_response raised
    assert error is not None
    raise error


def _b64crc(value: int) -> str:
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def _crc_of(resource: dict) -> int | None:
    raw = resource.get("crc32c")
    return int.from_bytes(base64.b64decode(raw), "big") if raw else None


def _object_url(fs, bucket: str, key: str) -> str:
    return f"{fs._location}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"


async def _put(fs, bucket: str, key: str, data, crc: int) -> dict:
    """Upload ``data`` as ``bucket/key`` in one request; the server checks ``crc`` (CRC32C)."""
    import aiohttp

    url = f"{fs._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o"
    meta = {"name": key, "crc32c": _b64crc(crc), "contentType": "application/octet-stream"}

    def body():  # a multipart payload is spent by sending it: a fresh one (same data) per try
        writer = aiohttp.MultipartWriter("related")
        writer.append_json(meta)
        writer.append(data, {"Content-Type": "application/octet-stream"})
        return writer

    _, raw = await _send(fs, "POST", url, f"gs://{bucket}/{key}",
                         params={"uploadType": "multipart"}, data=body)
    return json.loads(raw)


async def _get_resource(fs, bucket: str, key: str) -> dict | None:
    """The object resource of ``bucket/key``, or ``None`` when there is none."""
    try:
        _, raw = await _send(fs, "GET", _object_url(fs, bucket, key), f"gs://{bucket}/{key}")
    except FileNotFoundError:
        return None
    return json.loads(raw)


async def _compose(fs, bucket: str, sources: list[str], dest: str, size: int,
                   crc: int | None) -> dict:
    """Compose ``sources`` (in order) into ``dest``, deleting the sources in the same request.

    A retry that finds the sources gone (an earlier try composed them and its answer was lost)
    accepts ``dest`` when it has ``size`` bytes and, when given, CRC32C ``crc``.
    """

    async def recover() -> bytes | None:
        found = await _get_resource(fs, bucket, dest)
        if found is None or int(found.get("size", -1)) != size:
            return None
        if crc is not None and _crc_of(found) != crc:
            return None
        return json.dumps(found).encode()

    body = {
        "kind": "storage#composeRequest",
        "sourceObjects": [{"name": name} for name in sources],
        "destination": {"contentType": "application/octet-stream"},
        "deleteSourceObjects": True,
    }
    _, raw = await _send(fs, "POST", _object_url(fs, bucket, dest) + "/compose",
                         f"gs://{bucket}/{dest}", json_body=body, recover=recover)
    return json.loads(raw)


async def _compose_tree(fs, bucket: str, parts: list[tuple[str, int]], dest: str, crc: int,
                        temp: str) -> dict:
    """Compose ``parts`` (``(name, size)``) into ``dest``: 32 at a time, in a tree of temporary
    objects named after ``temp`` when there are more (each level one round trip)."""
    level = 0
    while len(parts) > MAX_COMPOSE_SOURCES:
        groups = [parts[i:i + MAX_COMPOSE_SOURCES] for i in range(0, len(parts), MAX_COMPOSE_SOURCES)]
        names = [f"{temp}.c{level}-{i:05d}" for i in range(len(groups))]
        sizes = [sum(size for _, size in group) for group in groups]
        await asyncio.gather(*(
            _compose(fs, bucket, [name for name, _ in group], name, size, None)
            for group, name, size in zip(groups, names, sizes)))
        parts = list(zip(names, sizes))
        level += 1
    return await _compose(fs, bucket, [name for name, _ in parts], dest,
                          sum(size for _, size in parts), crc)


async def _delete_many(fs, bucket: str, keys: Iterable[str]) -> list[str]:
    """Delete ``keys`` (a few at a time); those already gone are fine. Returns the deleted."""
    gate = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def one(key: str) -> str | None:
        async with gate:
            try:
                await _send(fs, "DELETE", _object_url(fs, bucket, key), f"gs://{bucket}/{key}")
            except FileNotFoundError:
                return None
            return key

    done = await asyncio.gather(*(one(k) for k in keys))
    return [k for k in done if k is not None]


async def _list_names(fs, bucket: str, prefix: str) -> list[str]:
    """Names of the objects directly under ``prefix`` (``/`` delimits), all pages."""
    url = f"{fs._location}/storage/v1/b/{quote(bucket, safe='')}/o"
    names: list[str] = []
    token = None
    while True:
        params = {"prefix": prefix, "delimiter": "/", "fields": "items(name),nextPageToken"}
        if token:
            params["pageToken"] = token
        _, raw = await _send(fs, "GET", url, f"gs://{bucket}/{prefix}", params=params)
        page = json.loads(raw)
        names.extend(item["name"] for item in page.get("items", ()))
        token = page.get("nextPageToken")
        if not token:
            return names


def _run(fs, coro, timeout: float | None = None):
    """Run ``coro`` on gcsfs's event loop from this (other) thread and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, fs.loop).result(timeout)


def can_compose(fs, path: str) -> bool:
    """Whether ``path``'s bucket takes composite uploads: a gcsfs filesystem, and not a zonal
    bucket (gcsfs's experimental class asks the bucket's type once; zonal buckets keep gcsfs's
    own appendable uploads)."""
    try:
        from gcsfs.core import GCSFileSystem
    except ImportError:  # pragma: no cover - gs:// without gcsfs cannot get here
        return False
    if not isinstance(fs, GCSFileSystem):
        return False
    zonal = getattr(fs, "_is_zonal_bucket", None)
    return zonal is None or not _run(fs, zonal(fs.split_path(path)[0]))


def temporary_prefix(key: str) -> str:
    """Where the temporary objects of one upload of ``key`` go: ``dir/.{name}.tmp-{token}``,
    the form :func:`tpudata.storage.cleanup_temporaries` knows for local files."""
    directory, _, name = key.rpartition("/")
    return f"{directory}/" * bool(directory) + f".{name}{TEMP_MARKER}{uuid.uuid4().hex[:12]}"


def final_name_of(temporary: str) -> str | None:
    """The name a temporary object (``.{name}.tmp-...``, no directory) was written for."""
    if not temporary.startswith(".") or TEMP_MARKER not in temporary:
        return None
    return temporary[1:temporary.index(TEMP_MARKER)]


def remove_temporaries(fs, directory: str, prefixes: tuple[str, ...]) -> list[str]:
    """Delete the temporary objects that interrupted uploads left directly in ``directory``
    (``bucket/dir`` as gcsfs spells it) for final names starting with one of ``prefixes``.
    One listing, then the deletes a few at a time. Returns the paths removed."""
    bucket, key, _ = fs.split_path(directory)
    head = f"{key.rstrip('/')}/" if key else ""

    async def sweep() -> list[str]:
        names = await _list_names(fs, bucket, head + ".")
        doomed = [n for n in names
                  if (final := final_name_of(n[len(head):])) is not None
                  and final.startswith(prefixes)]
        return await _delete_many(fs, bucket, doomed)

    removed = [f"{bucket}/{name}" for name in _run(fs, sweep())]
    if removed:
        logger.info("removed %d temporary object(s) from gs://%s", len(removed), directory)
    return removed


# ------------------------------------------------------------------ the writer
@dataclass
class _Part:
    name: str
    size: int
    future: Future


class ComposedUpload:
    """A ``gs://`` object written as parts uploaded in parallel and composed on :meth:`close`.

    See the module doc. ``fs`` is a gcsfs filesystem, ``path`` the object (``bucket/key``),
    ``url`` how errors name it. ``parallel`` parts of ``part_size`` bytes are uploaded at once;
    the writer holds at most ``(parallel + 1) * part_size`` bytes.
    """

    def __init__(self, fs, path: str, url: str, parallel: int = PARALLEL,
                 part_size: int = PART_SIZE):
        self._fs = fs
        self.url = url
        self._bucket, self._key, _ = fs.split_path(path)
        self.parallel = max(1, int(parallel))
        self.part_size = int(part_size)
        self.min_part = min(MIN_PART, self.part_size)
        self._temp = temporary_prefix(self._key)
        self._buffer = bytearray()
        self._parts: list[_Part] = []
        self._window: collections.deque[_Part] = collections.deque()
        self._size = 0
        self._crc = 0
        self._composing = False  # a failed compose may leave intermediate objects
        self.closed = False
        self.resource: dict | None = None  # the final object's resource, after close

    # -- writing
    def write(self, data) -> int:
        if self.closed:
            raise ValueError("write to a closed upload")
        view = memoryview(data).cast("B")
        n = view.nbytes
        while view.nbytes:
            take = min(self.part_size - len(self._buffer), view.nbytes)
            self._buffer += view[:take]
            view = view[take:]
            if len(self._buffer) >= self.part_size:
                self._send_part(self._take_buffer())
        if len(self._buffer) >= self.min_part and self._idle():
            self._send_part(self._take_buffer())  # keep every connection busy
        self._size += n
        return n

    def _idle(self) -> bool:
        """Whether fewer than ``parallel`` parts are in flight (finished ones leave the window;
        a failed one raises)."""
        for part in [p for p in self._window if p.future.done()]:
            self._window.remove(part)
            self._wait(part)
        return len(self._window) < self.parallel

    def flush(self) -> None:
        """Nothing to do: full parts are on their way already."""

    def tell(self) -> int:
        return self._size

    def _take_buffer(self) -> bytearray:
        data, self._buffer = self._buffer, bytearray()
        return data

    def _send_part(self, data, bounded: bool = True) -> None:
        while bounded and len(self._window) >= self.parallel:
            self._wait(self._window.popleft())
        self._crc = crc32c(data, self._crc)
        name = f"{self._temp}.part-{len(self._parts):05d}"
        future = asyncio.run_coroutine_threadsafe(
            _put(self._fs, self._bucket, name, data, crc32c(data)), self._fs.loop)
        part = _Part(name, len(data), future)
        self._parts.append(part)
        self._window.append(part)

    def _wait(self, part: _Part) -> None:
        try:
            part.future.result()
        except Exception as exc:
            raise self._error(exc, f"uploading part {part.name!r} of") from exc

    def _error(self, exc: BaseException, doing: str) -> BaseException:
        if isinstance(exc, StorageError):
            return exc
        from tpudata import _gcs

        if _gcs.is_denied(exc):
            return _gcs.denied_error(self.url, exc, None)
        if isinstance(exc, FileNotFoundError):
            bucket = _gcs.bucket_missing(self._fs, f"{self._bucket}/{self._key}")
            if bucket is not None:
                return _gcs.missing_bucket_error(bucket, self.url)
        return StorageError(f"{doing} {self.url!r} failed: {type(exc).__name__}: {exc}",
                            url=self.url)

    # -- finishing
    def close(self) -> None:
        """Upload what is left and publish the object under its final name (or raise
        :class:`StorageError` and leave nothing there)."""
        if self.closed:
            return
        self.closed = True
        if not self._parts:  # under one part: one request, straight to the final name
            data = self._take_buffer()
            self._crc = crc32c(data)
            try:
                self.resource = _run(self._fs, _put(self._fs, self._bucket, self._key, data,
                                                    self._crc))
            except Exception as exc:
                raise self._error(exc, "uploading") from exc
            return
        self._send_tail()
        for part in self._parts:
            self._wait(part)
        self._window.clear()
        self._composing = True
        try:
            self.resource = _run(self._fs, _compose_tree(
                self._fs, self._bucket, [(p.name, p.size) for p in self._parts], self._key,
                self._crc, self._temp))
        except Exception as exc:
            raise self._error(exc, f"composing {len(self._parts)} part(s) into") from exc
        self._parts.clear()  # deleted by the compose (and the intermediate objects too)
        size, crc = int(self.resource.get("size", -1)), _crc_of(self.resource)
        if size != self._size or (crc is not None and crc != self._crc):
            _run(self._fs, _delete_many(self._fs, self._bucket, [self._key]))
            raise StorageError(
                f"composing {self.url!r} gave {size} bytes with CRC32C {crc}, not the "
                f"{self._size} bytes with CRC32C {self._crc} written; the object was deleted",
                url=self.url)

    def _send_tail(self) -> None:
        """The last, partial part, split so that it goes over ``parallel`` connections."""
        data = self._take_buffer()
        if not data:
            return
        pieces = max(1, min(self.parallel, len(data) // MIN_TAIL_PIECE))
        step = -(-len(data) // pieces)
        view = memoryview(data)
        for start in range(0, len(data), step):
            self._send_part(view[start:start + step], bounded=False)

    def discard(self, wait: bool = True) -> None:
        """Stop the uploads and delete the parts already uploaded (best effort: what is left is
        removed by the next :func:`remove_temporaries`). ``wait=False`` never blocks (a
        finaliser may run on the event loop's own thread)."""
        self.closed = True
        self._buffer = bytearray()
        parts, self._parts = self._parts, []
        self._window.clear()
        if not parts:
            return
        fs, bucket, temp, composing = self._fs, self._bucket, self._temp, self._composing

        async def cleanup() -> None:  # parts in flight finish first (a cancelled request may
            # still be committed by the server after a delete): then every part is deleted
            await asyncio.gather(*(asyncio.wrap_future(p.future) for p in parts),
                                 return_exceptions=True)
            names = {p.name for p in parts}
            if composing:  # and what a compose tree made of them
                names.update(await _list_names(fs, bucket, temp))
            await _delete_many(fs, bucket, sorted(names))

        future = asyncio.run_coroutine_threadsafe(cleanup(), fs.loop)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if not wait or running is fs.loop:
            return
        try:
            future.result(ABORT_TIMEOUT_S)
        except (Exception, FutureTimeout) as exc:
            logger.warning("could not delete the uploaded parts of %s: %s", self.url, exc)
