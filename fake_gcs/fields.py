"""Partial responses: the ``fields`` parameter (``items(name,size),nextPageToken``, ``a/b``)."""

from __future__ import annotations

import logging

from fake_gcs.errors import bad_request

logger = logging.getLogger(__name__)

Selector = dict  # name -> Selector (empty dict: the whole value)


def parse_fields(spec: str) -> Selector:
    """Parse a ``fields`` expression into a nested selector; 400 when malformed."""
    pos, tree = _parse_list(spec, 0)
    if pos != len(spec):
        raise bad_request(f"Invalid field selection {spec!r}")
    return tree


def _merge(into: Selector, path: list[str], sub: Selector) -> None:
    node = into
    for name in path[:-1]:
        existed = name in node
        node = node.setdefault(name, {})
        if existed and node == {}:
            node["*"] = {}  # already selected whole: naming a sub-field keeps it whole
    leaf = node.get(path[-1])
    if leaf is None or not sub:
        node[path[-1]] = {} if not sub or leaf == {} else sub
    else:
        leaf.update(sub)


def _parse_list(spec: str, pos: int) -> tuple[int, Selector]:
    tree: Selector = {}
    while True:
        start = pos
        while pos < len(spec) and spec[pos] not in ",()":
            pos += 1
        path = [p.strip() for p in spec[start:pos].split("/")]
        if not all(path):
            raise bad_request(f"Invalid field selection {spec!r}")
        sub: Selector = {}
        if pos < len(spec) and spec[pos] == "(":
            pos, sub = _parse_list(spec, pos + 1)
            if pos >= len(spec) or spec[pos] != ")":
                raise bad_request(f"Invalid field selection {spec!r}")
            pos += 1
        _merge(tree, path, sub)
        if pos < len(spec) and spec[pos] == ",":
            pos += 1
            continue
        return pos, tree


def apply_fields(value, selector: Selector):
    """Keep only the selected parts of ``value`` (lists apply the selector to each element)."""
    if not selector or "*" in selector and len(selector) == 1:
        return value
    if isinstance(value, list):
        return [apply_fields(v, selector) for v in value]
    if not isinstance(value, dict):
        return value
    if "*" in selector:
        return value
    out = {}
    for name, sub in selector.items():
        if name in value:
            out[name] = apply_fields(value[name], sub)
    return out
