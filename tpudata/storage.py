"""Storage over fsspec URLs: local paths, ``file://``, ``memory://``, ``gs://`` (gcsfs), ...

Local paths take a fast path (plain ``open``); everything else goes through fsspec. When
``STORAGE_EMULATOR_HOST`` is set (a fake GCS server such as :mod:`fake_gcs`) or
``storage_options`` name an ``endpoint_url``, ``gs://`` URLs use ``gcsfs.core.GCSFileSystem`` with
that endpoint and anonymous credentials, passed as arguments (the process environment is never
changed): gcsfs's experimental class asks a gRPC control plane no emulator has and stalls ~60 s a
call.

Writes are atomic: :func:`open_atomic` never leaves a partial object under the final name (local:
temporary name + rename; GCS: the object appears when its upload is finalised; memory: committed
on close), and an error inside its ``with`` block discards what was written.

>>> with open_atomic("memory://doc/x.bin") as f:
...     _ = f.write(b"abc")
>>> size("memory://doc/x.bin"), exists("memory://doc/x.bin")
(3, True)
"""

from __future__ import annotations

import contextlib
import glob as _glob
import io
import logging
import os
import uuid
from typing import IO, Iterable

import fsspec

from tpudata import _objects
from tpudata.errors import StorageError

logger = logging.getLogger(__name__)

DEFAULT_BUFFER_SIZE = 8 << 20  # 8 MiB, as the Cloud TPU performance guide recommends
TEMP_MARKER = ".tmp-"
# files tpudata writes beside shards: build manifests and journals, index files. A glob skips them
# unless its last component itself ends with the suffix (``*.idx`` finds index files).
SIDE_FILE_SUFFIXES = (".manifest.json", ".manifest.partial.json", ".idx")
_GLOB_CHARS = set("*?[")


def is_local(url: str) -> bool:
    """True for plain paths and ``file://`` URLs."""
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    """The filesystem path of a local URL (``file:///a/b`` -> ``/a/b``)."""
    return url[len("file://") :] if url.startswith("file://") else url


def _protocol(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def emulator_host() -> str | None:
    """The GCS emulator address from ``STORAGE_EMULATOR_HOST``, if one is configured."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "")
    return host if host not in ("", "default") else None


def _http(host: str) -> str:
    return host if host.startswith(("http://", "https://")) else f"http://{host}"


def gcs_filesystem(**storage_options):
    """A gcsfs filesystem for ``gs://`` URLs.

    Against an emulator (``STORAGE_EMULATOR_HOST``, or ``endpoint_url`` in ``storage_options``)
    it is gcsfs's core class, given the endpoint and anonymous credentials explicitly: gcsfs's
    experimental class probes a gRPC control plane no emulator has and stalls ~60 s a call.
    Nothing in ``os.environ`` changes. The first use of an endpoint checks that it answers and,
    for real GCS without a ``token``, looks for Google credentials once (anonymous access when
    there are none): an unreachable endpoint raises :class:`StorageError` at once instead of
    after a minute of retries (see :mod:`tpudata._gcs`).
    """
    return _gcs_filesystem(None, storage_options)


def _gcs_filesystem(url: str | None, storage_options: dict):
    from tpudata import _gcs

    # own aiohttp session settings (a proxy, a connector): the direct TCP check does not apply
    direct = not storage_options.get("session_kwargs")
    host = storage_options.get("endpoint_url") or emulator_host()
    if host:
        import gcsfs.core

        storage_options.setdefault("token", "anon")
        storage_options["endpoint_url"] = _http(host)
        if storage_options["token"] == "google_default":
            _gcs.default_token(url, required=True)
        if direct:
            _gcs.check_endpoint(storage_options["endpoint_url"], url, emulator=True)
        return gcsfs.core.GCSFileSystem(**storage_options)
    token = storage_options.get("token")
    discover = token is None or token == "google_default"
    if direct:  # first (no network: fails in seconds, before any metadata-server probe)
        hint = _gcs.local_credentials_note() if discover else None
        _gcs.check_endpoint(_gcs.DEFAULT_ENDPOINT, url, note=hint)
    note = None
    if discover:
        token, note = _gcs.default_token(url, required=token == "google_default")
        storage_options["token"] = token
    if note:
        _gcs.warn_anonymous(url, note)
    return fsspec.filesystem("gs", **storage_options)


def url_to_fs(url: str, **storage_options):
    """``(filesystem, path)`` for ``url``, with tpudata's GCS settings applied."""
    proto = _protocol(url)
    if proto in ("gs", "gcs"):
        fs = _gcs_filesystem(url, storage_options)
        return fs, fs._strip_protocol(url)
    try:
        return fsspec.core.url_to_fs(url, **storage_options)
    except (ImportError, ValueError) as exc:
        raise StorageError(f"cannot open {url!r}: {exc}", url=url) from exc


def _is_gcs(url: str) -> bool:
    return _protocol(url) in ("gs", "gcs")


def _check_bucket(fs, path: str, url: str) -> None:
    """Raise :class:`StorageError` if ``url`` is on GCS and its bucket does not exist."""
    if _is_gcs(url):
        from tpudata import _gcs

        bucket = _gcs.bucket_missing(fs, path)
        if bucket is not None:
            raise _gcs.missing_bucket_error(bucket, url)


@contextlib.contextmanager
def _explained(url: str, fs=None, path: str | None = None):
    """Turn gcsfs's access-denied and missing-bucket errors on ``url`` into :class:`StorageError`.

    A ``FileNotFoundError`` stays one unless the bucket itself is missing.
    """
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError:
        if fs is not None:
            _check_bucket(fs, path if path is not None else fs._strip_protocol(url), url)
        raise
    except Exception as exc:
        if not _is_gcs(url):
            raise
        from tpudata import _gcs

        if _gcs.is_denied(exc):
            note = None
            if getattr(getattr(fs, "credentials", None), "method", None) == "anon":
                note = f"no credentials were used: {_gcs.LOGIN_ADVICE}"
            raise _gcs.denied_error(url, exc, note) from exc
        raise


def join(base: str, *names: str) -> str:
    """Join path components onto a URL or local path with ``/``."""
    out = base
    for name in names:
        out = out.rstrip("/") + "/" + name.lstrip("/") if out else name
    return out


def _glob_start(pattern: str) -> int:
    """Where the first glob character of ``pattern`` is (its length when there is none)."""
    return min((pattern.index(c) for c in _GLOB_CHARS if c in pattern), default=len(pattern))


def _full_url(fs, path: str, pattern: str) -> str:
    """``path`` (as the filesystem returns it) spelled like ``pattern``'s URL."""
    if is_local(pattern):
        return path
    head = pattern[: pattern.rfind("/", 0, _glob_start(pattern)) + 1]
    fs_head = fs._strip_protocol(head).rstrip("/")
    if "://" in head and head.index("://") + 3 < len(head) and path.startswith(fs_head + "/"):
        return head.rstrip("/") + path[len(fs_head) :]
    return fs.unstrip_protocol(path)


def open_read(url: str, buffer_size: int = DEFAULT_BUFFER_SIZE, sequential: bool = False,
              **storage_options) -> IO[bytes]:
    """Open ``url`` for binary reading with no cache of its own (callers read big blocks).

    ``sequential=True`` says the caller reads front to back: a gs:// object then reads ahead in
    ``buffer_size`` ranges through the process's shared pool of ranged reads
    (:mod:`tpudata._ranged`). The result supports ``readinto``, ``seek`` and ``tell``.
    """
    try:
        if is_local(url):
            return open(local_path(url), "rb", buffering=0)
        fs, path = url_to_fs(url, **storage_options)
        with _explained(url, fs, path):
            if _is_gcs(url):  # ranged GETs of one generation; no metadata request when listed
                info = _objects.TABLE.get(_objects.endpoint_of(fs), path)
                return _objects.PinnedObject(fs, path, url, info, sequential, buffer_size)
            return fs.open(path, "rb", block_size=buffer_size, cache_type="none")
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"cannot open {url!r} for reading: {exc}", url=url) from exc


def configure_gcs_reads(connections: int | None = None, max_bytes: int | None = None) -> dict:
    """Size this process's pool of gs:// ranged reads, shared by every file read front to back.

    ``connections``: requests at once (default 32); ``max_bytes``: read-ahead memory in all
    (default 256 MiB, plus one range per reader waiting on the range it needs). Reads under way
    finish on the old pool. Returns the new pool's figures (``stats()``).

    >>> configure_gcs_reads(connections=16)["connections"]
    16
    >>> _ = configure_gcs_reads(connections=32)
    """
    from tpudata import _ranged

    return _ranged.configure(connections, max_bytes).stats()


def _fresh(url: str, storage_options):
    """``(fs, path)`` with fsspec's listing cache for ``path`` dropped (objects change under us)."""
    fs, path = url_to_fs(url, **storage_options)
    invalidate = getattr(fs, "invalidate_cache", None)
    if invalidate is not None:
        invalidate(path)
    return fs, path


def size(url: str, **storage_options) -> int:
    """Size of the object at ``url`` in bytes (asked afresh, not from a cached listing)."""
    if is_local(url):
        return os.path.getsize(local_path(url))
    fs, path = _fresh(url, storage_options)
    with _explained(url, fs, path):
        return int(fs.size(path))


def stat(url: str, **storage_options) -> _objects.ObjectInfo:
    """Size (and generation) of the object at ``url``: from the last listing that saw it (no
    request), else asked once. Use :func:`size` to ask afresh."""
    if is_local(url):
        return _objects.ObjectInfo(os.path.getsize(local_path(url)), None)
    fs, path = url_to_fs(url, **storage_options)
    info = _objects.TABLE.get(_objects.endpoint_of(fs), path) if _is_gcs(url) else None
    if info is not None:
        return info
    fs, path = _fresh(url, storage_options)
    with _explained(url, fs, path):
        info = _objects.info_of(fs.info(path))
    if _is_gcs(url):
        _objects.TABLE.remember(_objects.endpoint_of(fs), path, info)
    return info


def listed_exists(url: str, **storage_options) -> bool:
    """Whether ``url`` exists, answered from a listing that covered it when there is one (an
    index file beside listed shards costs no request), else asked afresh."""
    if _is_gcs(url):
        fs, path = url_to_fs(url, **storage_options)
        endpoint = _objects.endpoint_of(fs)
        if _objects.TABLE.get(endpoint, path) is not None:
            return True
        if _objects.TABLE.known_absent(endpoint, path):
            return False
    return exists(url, **storage_options)


def _forget(url: str, fs, path: str) -> None:
    """tpudata changed the object at ``url``: what a listing said of it no longer holds."""
    if _is_gcs(url):
        _objects.TABLE.forget(_objects.endpoint_of(fs), path)


def exists(url: str, **storage_options) -> bool:
    """Whether ``url`` names an existing file or object (asked afresh)."""
    if is_local(url):
        return os.path.exists(local_path(url))
    fs, path = _fresh(url, storage_options)
    with _explained(url, fs, path):
        return bool(fs.exists(path))


def move(src: str, dst: str, **storage_options) -> None:
    """Rename ``src`` to ``dst`` (atomic for local files on one filesystem)."""
    if is_local(src) and is_local(dst):
        os.replace(local_path(src), local_path(dst))
        return
    fs, src_path = url_to_fs(src, **storage_options)
    _, dst_path = url_to_fs(dst, **storage_options)
    fs.mv(src_path, dst_path)
    _forget(src, fs, src_path)
    _forget(dst, fs, dst_path)


def remove(url: str, missing_ok: bool = True, **storage_options) -> None:
    """Delete the file or object at ``url``."""
    try:
        if is_local(url):
            os.remove(local_path(url))
        else:
            fs, path = url_to_fs(url, **storage_options)
            _forget(url, fs, path)
            fs.rm_file(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


def makedirs(url: str, **storage_options) -> None:
    """Create a directory (and parents) for local URLs; object stores need none."""
    if is_local(url):
        os.makedirs(local_path(url), exist_ok=True)
    elif _protocol(url) == "memory":
        fs, path = url_to_fs(url, **storage_options)
        fs.makedirs(path, exist_ok=True)


def read_bytes(url: str, **storage_options) -> bytes:
    """The whole content of a (small) file."""
    if is_local(url):
        with open(local_path(url), "rb") as f:
            return f.read()
    fs, path = url_to_fs(url, **storage_options)
    with _explained(url, fs, path):
        return fs.cat_file(path)


def glob(pattern: str, include_side_files: bool = False, **storage_options) -> list[str]:
    """Files matching ``pattern``, sorted like TensorFlow's ``MatchingFiles``.

    Results keep the pattern's form (plain paths for local patterns, full URLs otherwise).
    Names starting with ``.`` (temporaries) match only a pattern whose last part starts so,
    on every filesystem, as Python's ``glob`` treats local files.
    tpudata's side files (``*.manifest.json``, ``*.idx``: :data:`SIDE_FILE_SUFFIXES`) are left
    out unless the pattern's ending asks for them (``*.idx``) or ``include_side_files``. On GCS
    it is one listing (paged) whose sizes and generations later opens use.
    """
    if is_local(pattern):
        prefix = "file://" if pattern.startswith("file://") else ""
        found = [p for p in _glob.glob(local_path(pattern), recursive=True) if os.path.isfile(p)]
        if not include_side_files:
            found = _without_side_files(found, pattern)
        return sorted(prefix + p for p in found)
    fs, path = url_to_fs(pattern, **storage_options)
    with _explained(pattern, fs, path):
        # one listing (paged) with every object's size: no request per matched object
        listed = fs.glob(path, detail=True)
    found = [p for p, entry in listed.items() if entry.get("type", "file") != "directory"]
    if _is_gcs(pattern):
        _objects.TABLE.record_listing(_objects.endpoint_of(fs), path[:_glob_start(path)],
                                      {p: _objects.info_of(listed[p]) for p in found})
    if not pattern.rstrip("/").rsplit("/", 1)[-1].startswith("."):
        # as for local files (Python's glob, the shell): a name starting with "." (an
        # unfinished upload's parts, a write probe) only matches a pattern that starts so too
        found = [p for p in found if not p.rsplit("/", 1)[-1].startswith(".")]
    if not include_side_files:
        found = _without_side_files(found, pattern)
    if not found:
        _check_bucket(fs, path, pattern)
    return sorted(_full_url(fs, p, pattern) for p in found)


def is_side_file(name: str) -> bool:
    """Whether ``name`` is one of the files tpudata writes beside shards (manifest, journal,
    index file)."""
    return name.endswith(SIDE_FILE_SUFFIXES)


def _without_side_files(found: list[str], pattern: str) -> list[str]:
    last = pattern.rstrip("/").rsplit("/", 1)[-1]
    tail = last[max(last.rfind(c) for c in _GLOB_CHARS | {"]"}) + 1:] if has_glob(last) else last
    # a pattern whose literal ending names a side file's suffix asks for them ("*.idx", "*.json")
    asked = tuple(s for s in SIDE_FILE_SUFFIXES if tail and s.endswith(tail) or last.endswith(s))
    kept = [p for p in found if not is_side_file(p) or p.endswith(asked or ("\0",))]
    if len(kept) < len(found):
        logger.debug("%s: skipped %d manifest/index file(s)", pattern, len(found) - len(kept))
    return kept


def has_glob(pattern: str) -> bool:
    """Whether ``pattern`` is a glob (``*``, ``?`` or ``[``) rather than one path or URL."""
    return _protocol(pattern) not in ("http", "https") and bool(_GLOB_CHARS & set(pattern))


def expand(patterns: str | Iterable[str], **storage_options) -> list[str]:
    """Expand a path/URL or glob, or a list of them, into files; no match raises StorageError."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [os.fspath(patterns)]
    out: list[str] = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        if _protocol(pattern) in ("http", "https"):
            out.append(pattern)  # "?" starts a query string; HTTP has no listing to glob
            continue
        if _GLOB_CHARS & set(pattern):
            matches = glob(pattern, **storage_options)
            if not matches:
                raise StorageError(f"no files match {pattern!r}", url=pattern)
            out.extend(matches)
        elif listed_exists(pattern, **storage_options):  # no request for a listed object
            out.append(pattern)
        else:
            if _is_gcs(pattern):
                fs, path = url_to_fs(pattern, **storage_options)
                _check_bucket(fs, path, pattern)
            raise StorageError(f"no such file: {pattern!r}", url=pattern)
    return out


def _object_writer(fs, path: str, url: str, parallel: int | None, part_size: int | None):
    """The file an :class:`AtomicWriter` writes an object store's ``url`` through.

    ``gs://``: a parallel composite upload (:class:`tpudata._upload.ComposedUpload`: parts
    uploaded in the background while writing goes on, composed into the final name on close)
    unless ``parallel=0`` (or ``TPUDATA_GCS_UPLOAD_PARALLEL=0``) or the bucket cannot compose
    (zonal buckets); else the filesystem's own file (gcsfs: one resumable upload, finalised on
    close).
    """
    if _is_gcs(url):
        from tpudata import _upload

        parallel, part_size = _upload.upload_settings(parallel, part_size)
        if parallel and _upload.can_compose(fs, path):
            return _upload.ComposedUpload(fs, path, url, parallel, part_size)
    return fs.open(path, "wb")


class AtomicWriter:
    """A binary file that appears under its final name only when :meth:`close` succeeds.

    Use as a context manager: leaving the block with an exception calls :meth:`abort`, which
    discards everything written (and the temporary file, for local paths); a writer dropped
    without :meth:`close` is aborted too. ``fsync=True`` makes
    a local file durable before it is renamed into place.

    ``gs://`` objects are uploaded while they are written: full parts of ``part_size`` bytes
    (default 8 MiB) go up in the background, ``parallel`` (default 8) at once, and
    :meth:`close` composes them into the final name (see :mod:`tpudata._upload`). One writer
    holds at most ``(parallel + 1) * part_size`` bytes (72 MiB by default); the environment's
    ``TPUDATA_GCS_UPLOAD_PARALLEL`` and ``TPUDATA_GCS_UPLOAD_PART_MIB`` set the defaults, and
    ``parallel=0`` uses gcsfs's sequential resumable upload instead. Parts an interrupted
    writer leaves are hidden temporary objects that a sharded build's next run removes.
    """

    def __init__(self, url: str, fsync: bool = False, *, parallel: int | None = None,
                 part_size: int | None = None, **storage_options):
        self.url = url
        self.fsync = fsync
        self._tmp: str | None = None
        self._commit_after_close = False
        self.closed = False
        if is_local(url):
            path = local_path(url)
            directory = os.path.dirname(path) or "."
            os.makedirs(directory, exist_ok=True)
            name = f".{os.path.basename(path)}{TEMP_MARKER}{uuid.uuid4().hex[:12]}"
            self._tmp = os.path.join(directory, name)
            self._final = path
            self._f = open(self._tmp, "wb")
        else:
            fs, path = url_to_fs(url, **storage_options)
            self._fs = fs
            self._final = path
            if _protocol(url) == "memory":
                # memory:// publishes a file as soon as it is opened: buffer, publish at close
                self._commit_after_close = True
                self._f = io.BytesIO()
            else:
                # gcsfs (and other object stores) only finalise the upload on close
                with _explained(url, fs, path):
                    self._f = _object_writer(fs, path, url, parallel, part_size)

    def write(self, data) -> int:
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        """Finish writing and publish the file under its final name."""
        if self.closed:
            return
        self.closed = True
        try:
            if self._tmp is not None:
                if self.fsync:  # durable before it is visible: no empty file after a power cut
                    self._f.flush()
                    os.fsync(self._f.fileno())
                self._f.close()
                os.replace(self._tmp, self._final)
                self._tmp = None
            elif self._commit_after_close:
                self._fs.pipe_file(self._final, self._f.getvalue())
            else:
                with _explained(self.url, self._fs, self._final):
                    self._f.close()
            if self._tmp is None and not is_local(self.url):
                _forget(self.url, self._fs, self._final)
                self._fs.invalidate_cache(self._final)
        except BaseException:
            self._discard()
            raise

    def abort(self) -> None:
        """Throw away what was written; nothing appears under the final name."""
        if self.closed:
            return
        self.closed = True
        self._discard()

    def _discard(self, wait: bool = True) -> None:
        if self._tmp is not None:
            try:
                self._f.close()
            finally:
                try:
                    os.remove(self._tmp)
                except FileNotFoundError:
                    pass
                self._tmp = None
            return
        if self._commit_after_close:
            return
        discard = getattr(self._f, "discard", None)
        try:
            if isinstance(self._f, _upload_type()):
                self._f.discard(wait=wait)  # never blocks a finaliser
            elif discard is not None:
                discard()
        except Exception as exc:  # pragma: no cover - best effort on a failing store
            logger.warning("could not cancel the upload of %s: %s", self.url, exc)
        # fsspec files upload on close() (even from __del__): make sure that never happens.
        try:
            self._f.closed = True
        except AttributeError:  # pragma: no cover
            pass

    def __del__(self) -> None:
        # dropped without close(): abandon the write. Left alone, fsspec files upload what they
        # hold when collected, which would publish a partial object under the final name.
        try:
            if not self.closed:
                self.closed = True
                self._discard(wait=False)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self) -> "AtomicWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _upload_type() -> type:
    from tpudata._upload import ComposedUpload

    return ComposedUpload


def open_atomic(url: str, fsync: bool = False, *, parallel: int | None = None,
                part_size: int | None = None, **storage_options) -> AtomicWriter:
    """Open ``url`` for writing so that it only ever appears complete (see :class:`AtomicWriter`;
    ``parallel`` and ``part_size`` shape ``gs://`` uploads)."""
    return AtomicWriter(url, fsync=fsync, parallel=parallel, part_size=part_size,
                        **storage_options)


def remove_upload_temporaries(directory: str, prefix: str | tuple[str, ...] = "",
                              **storage_options) -> list[str]:
    """Delete the temporary part objects interrupted ``gs://`` uploads of :func:`open_atomic`
    left directly in ``directory`` (``.{name}.tmp-*``), only for final names starting with
    ``prefix`` (a string or a tuple of them). One listing; nothing to do elsewhere
    (:func:`cleanup_temporaries` calls it for gs://). Returns the URLs removed."""
    if not _is_gcs(directory):
        return []
    from tpudata import _upload

    fs, path = url_to_fs(directory, **storage_options)
    prefixes = (prefix,) if isinstance(prefix, str) else tuple(prefix)
    with _explained(directory, fs, path):
        removed = _upload.remove_temporaries(fs, path, prefixes)
    return [fs.unstrip_protocol(p) for p in removed]


PROBE_PREFIX = ".tpudata-write-probe-"


def check_writable(directory: str, **storage_options) -> None:
    """Raise :class:`StorageError` unless a small object can be written to (and removed from)
    ``directory``: writers call it before long work so a wrong path, a read-only directory or a
    missing bucket fails at once. The probe (``.tpudata-write-probe-*``) goes through
    :func:`open_atomic` like real output; it is removed again (a failed removal only warns).
    """
    probe = join(directory, f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}")
    try:
        makedirs(directory, **storage_options)
        with open_atomic(probe, **storage_options) as f:
            f.write(b"tpudata write probe\n")
    except (OSError, ValueError) as exc:
        reason = exc.message if isinstance(exc, StorageError) else f"{type(exc).__name__}: {exc}"
        raise StorageError(f"cannot write to the output {directory!r}: {reason}; check the path, "
                           "its permissions and credentials before converting", url=directory
                           ) from exc
    try:
        remove(probe, **storage_options)
    except (OSError, ValueError) as exc:
        logger.warning("could not remove the write probe %s: %s", probe, exc)


def cleanup_temporaries(directory: str, prefix: str | tuple[str, ...] = "",
                        **storage_options) -> list[str]:
    """Remove temporary files left in ``directory`` by interrupted atomic writes: local
    temporaries, and on gs:// the part objects of interrupted uploads
    (:func:`remove_upload_temporaries`). Returns what was removed.

    With ``prefix`` (a string or a tuple of them), only temporaries of files whose final names
    start with it, so a build does not remove the temporaries of another writer working in the
    same directory.
    """
    if _is_gcs(directory):
        return remove_upload_temporaries(directory, prefix, **storage_options)
    if not is_local(directory):
        return []
    removed = []
    path = local_path(directory)
    if not os.path.isdir(path):
        return []
    prefixes = (prefix,) if isinstance(prefix, str) else tuple(prefix)
    for name in os.listdir(path):
        if not name.startswith(".") or TEMP_MARKER not in name:
            continue
        final = name[1 : name.index(TEMP_MARKER)]  # the name the file was being written as
        if final.startswith(prefixes):
            try:
                os.remove(os.path.join(path, name))
                removed.append(os.path.join(path, name))
            except FileNotFoundError:  # pragma: no cover - raced with another cleanup
                pass
    if removed:
        logger.info("removed %d temporary file(s) from %s", len(removed), directory)
    return removed
