"""Object listing: prefix, delimiter, offsets, glob, versions, and resumable page tokens."""

from __future__ import annotations

import base64
import bisect
import json
import logging
import re
from dataclasses import dataclass
from typing import Iterator

from fake_gcs.errors import bad_request
from fake_gcs.model import BucketState, ObjectVersion

logger = logging.getLogger(__name__)
MAX_PAGE = 1000


@dataclass
class ListQuery:
    prefix: str = ""
    delimiter: str | None = None
    start_offset: str | None = None
    end_offset: str | None = None
    versions: bool = False
    include_trailing_delimiter: bool = False
    match_glob: str | None = None
    max_results: int = MAX_PAGE
    page_token: str | None = None


def glob_to_regex(pattern: str) -> re.Pattern:
    """GCS ``matchGlob``: ``**`` crosses ``/``, ``*`` and ``?`` do not, ``[...]``, ``{a,b}``."""
    out, i, depth = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/" also matches nothing
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 2)
            if j < 0:
                raise bad_request(f"Invalid matchGlob: {pattern!r}")
            body = pattern[i + 1 : j]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j
        elif c == "{":
            out.append("(?:")
            depth += 1
        elif c == "}" and depth:
            out.append(")")
            depth -= 1
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    if depth:
        raise bad_request(f"Invalid matchGlob: {pattern!r}")
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error:
        raise bad_request(f"Invalid matchGlob: {pattern!r}") from None


def _encode_token(name: str, generation: int | None, is_prefix: bool) -> str:
    raw = json.dumps({"n": name, "g": generation, "p": is_prefix}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str) -> tuple[str, int | None, bool]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(data["n"]), data.get("g"), bool(data.get("p"))
    except (ValueError, KeyError, TypeError, RecursionError):
        raise bad_request("Invalid pageToken.") from None


def _prefix_end(names: list[str], prefix: str, lo: int) -> int:
    """Index of the first name at or after ``lo`` that does not start with ``prefix``."""
    hi = len(names)
    while lo < hi:
        mid = (lo + hi) // 2
        if names[mid].startswith(prefix) or names[mid] < prefix:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _entries(
    bucket: BucketState, q: ListQuery, versions_of, after: tuple[str, int | None, bool] | None
) -> Iterator[tuple[str, object]]:
    """Yield ``("item", version)`` / ``("prefix", str)`` in listing order, after ``after``."""
    names = bucket.names
    start = max(q.prefix, q.start_offset or "")
    i = bisect.bisect_left(names, start)
    skip_gen = None
    last_prefix = None
    if after is not None:
        name, gen, is_prefix = after
        if is_prefix:  # its names are skipped below, except a trailing-delimiter object
            i = max(i, bisect.bisect_left(names, name))
            last_prefix = name
        else:
            i = max(i, bisect.bisect_left(names, name))
            skip_gen = (name, gen)
            k = name.find(q.delimiter, len(q.prefix)) if q.delimiter else -1
            if k >= 0:  # resuming after a trailing-delimiter object: its prefix was emitted
                last_prefix = name[: k + len(q.delimiter)]
    glob = glob_to_regex(q.match_glob) if q.match_glob else None
    delim = q.delimiter or None
    while i < len(names):
        name = names[i]
        if not name.startswith(q.prefix):
            break
        if q.end_offset and name >= q.end_offset:
            break
        versions: list[ObjectVersion] = versions_of(bucket, name, q.versions)
        if skip_gen is not None and name == skip_gen[0]:
            versions = [v for v in versions if skip_gen[1] is not None and v.generation > skip_gen[1]]
        if not versions or (glob is not None and not glob.fullmatch(name)):
            i += 1
            continue
        if delim:
            rest = name[len(q.prefix) :]
            k = rest.find(delim)
            if k >= 0:
                collapsed = q.prefix + rest[: k + len(delim)]
                if collapsed != last_prefix:
                    last_prefix = collapsed
                    yield "prefix", collapsed
                if q.include_trailing_delimiter and name == collapsed:
                    for v in versions:
                        yield "item", v
                    i += 1
                    continue
                i = _prefix_end(names, collapsed, i + 1)
                continue
        for v in versions:
            yield "item", v
        i += 1


def list_page(bucket: BucketState, q: ListQuery, versions_of) -> tuple[list, list, str | None]:
    """One page: ``(items, prefixes, next_page_token)``; maxResults counts both lists."""
    after = _decode_token(q.page_token) if q.page_token else None
    limit = max(1, min(q.max_results or MAX_PAGE, MAX_PAGE))
    items, prefixes = [], []
    last = None
    token = None
    for kind, value in _entries(bucket, q, versions_of, after):
        if len(items) + len(prefixes) >= limit:
            token = _encode_token(*last)
            break
        if kind == "prefix":
            prefixes.append(value)
            last = (value, None, True)
        else:
            items.append(value)
            last = (value.name, value.generation, False)
    return items, prefixes, token
