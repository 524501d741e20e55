"""Nested element structures (dicts, tuples, namedtuples) flattened to leaves, as tf.data does.

Lists are values (tensors), not structure: ``from_tensor_slices([1, 2, 3])`` has three elements.

>>> tree, leaves = flatten({"b": (1, 2), "a": 3})
>>> leaves
[3, 1, 2]
>>> unflatten(tree, [30, 10, 20])
{'a': 30, 'b': (10, 20)}
"""

from __future__ import annotations

from typing import Any, Callable


class Tree:
    """The shape of a structure: ``kind`` is "leaf", "dict", "tuple" or a namedtuple type."""

    __slots__ = ("kind", "keys", "children", "num_leaves")

    def __init__(self, kind, keys=None, children=()):
        self.kind = kind
        self.keys = keys
        self.children = tuple(children)
        self.num_leaves = 1 if kind == "leaf" else sum(c.num_leaves for c in self.children)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Tree)
            and self.kind == other.kind
            and self.keys == other.keys
            and self.children == other.children
        )

    def __hash__(self) -> int:
        return hash((str(self.kind), self.keys, self.children))

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.keys, self.children)) + "}"
        return "(" + ", ".join(repr(c) for c in self.children) + ")"


LEAF = Tree("leaf")


def flatten(structure: Any) -> tuple[Tree, list]:
    """``(tree, leaves)``; dict keys are visited in sorted order (as tf.nest does)."""
    leaves: list = []
    tree = _flatten(structure, leaves)
    return tree, leaves


def _flatten(s, leaves: list) -> Tree:
    if isinstance(s, dict):
        keys = tuple(sorted(s))
        return Tree("dict", keys, [_flatten(s[k], leaves) for k in keys])
    if isinstance(s, tuple) and hasattr(s, "_fields"):
        return Tree(type(s), tuple(s._fields), [_flatten(v, leaves) for v in s])
    if isinstance(s, tuple):
        return Tree("tuple", None, [_flatten(v, leaves) for v in s])
    leaves.append(s)
    return LEAF


def unflatten(tree: Tree, leaves) -> Any:
    """Rebuild a structure of ``tree``'s shape from ``leaves`` (in flatten order)."""
    it = iter(leaves)
    return _unflatten(tree, it)


def _unflatten(tree: Tree, it):
    kind = tree.kind
    if kind == "leaf":
        return next(it)
    values = [_unflatten(c, it) for c in tree.children]
    if kind == "dict":
        return dict(zip(tree.keys, values))
    if kind == "tuple":
        return tuple(values)
    return kind(*values)  # namedtuple


def map_structure(fn: Callable, structure: Any) -> Any:
    """Apply ``fn`` to every leaf."""
    tree, leaves = flatten(structure)
    return unflatten(tree, [fn(x) for x in leaves])


def leaf_paths(tree: Tree, prefix: str = "") -> list[str]:
    """Readable names of the leaves (``"image"``, ``"0/label"``), for error messages."""
    if tree.kind == "leaf":
        return [prefix or "<element>"]
    names = tree.keys if tree.kind == "dict" else range(len(tree.children))
    out: list[str] = []
    for name, child in zip(names, tree.children):
        out += leaf_paths(child, f"{prefix}/{name}" if prefix else str(name))
    return out


def type_name(kind: type) -> str:
    """How a JSON structure names a namedtuple class: ``"module:qualname"``."""
    return f"{kind.__module__}:{kind.__qualname__}"


def tree_to_json(tree: Tree):
    """A JSON form of ``tree`` (namedtuples are saved by their module and name)."""
    if tree.kind == "leaf":
        return "*"
    kind = tree.kind
    if not isinstance(kind, str):
        kind = f"namedtuple:{type_name(kind)}"
    return {"kind": kind, "keys": None if tree.keys is None else list(tree.keys),
            "children": [tree_to_json(c) for c in tree.children]}


def namedtuple_types(*structures) -> dict:
    """``{"module:qualname": class}`` of every namedtuple class in ``structures`` (trees,
    structures of values or specs, or namedtuple classes): an allow-list for
    :func:`tree_from_json`."""
    found: dict = {}

    def walk(obj, depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        if isinstance(obj, Tree):
            if not isinstance(obj.kind, str):
                found[type_name(obj.kind)] = obj.kind
            for child in obj.children:
                walk(child, depth + 1)
        elif isinstance(obj, type):
            if issubclass(obj, tuple) and hasattr(obj, "_fields"):
                found[type_name(obj)] = obj
        elif isinstance(obj, (dict, tuple)):
            walk(flatten(obj)[0], depth + 1)

    for s in structures:
        walk(s, 0)
    return found


MAX_DEPTH = 100  # nesting a JSON structure may have (deeper ones are refused, not recursed into)


def tree_from_json(obj, types=None) -> Tree:
    """Inverse of :func:`tree_to_json`. Data only: a namedtuple is resolved from ``types``
    (``{"module:qualname": class}``, see :func:`namedtuple_types`), never imported; one that is
    not there raises :class:`~tpudata.errors.UntrustedTypeError`. A malformed structure raises
    ValueError."""
    return _tree_from_json(obj, types or {}, 0)


def _tree_from_json(obj, types, depth: int) -> Tree:
    from tpudata.errors import UntrustedTypeError

    if obj == "*":
        return LEAF
    if depth > MAX_DEPTH or not isinstance(obj, dict):
        raise ValueError(f"not a structure node: {str(obj)[:80]!r}")
    kind, keys, children = obj.get("kind"), obj.get("keys"), obj.get("children")
    if not isinstance(children, list) or not (keys is None or isinstance(keys, list)):
        raise ValueError(f"a structure node needs a list of children (and keys): {str(obj)[:80]!r}")
    if keys is not None and (len(keys) != len(children) or
                             not all(isinstance(k, str) for k in keys)):
        raise ValueError(f"a structure node's keys must be strings, one per child: {keys!r}"[:200])
    if kind == "dict":
        if keys is None:
            raise ValueError("a dict node without keys")
    elif kind == "tuple":
        if keys is not None:
            raise ValueError("a tuple node with keys")
    elif isinstance(kind, str) and kind.startswith("namedtuple:"):
        name = kind[len("namedtuple:"):]
        if name not in types:
            raise UntrustedTypeError(
                f"the structure names the namedtuple {name!r}, which is not among the classes "
                f"allowed here ({', '.join(sorted(types)) or 'none'}); tpudata never imports a "
                "class named in a file: pass the class itself", name)
        kind = types[name]
        if keys is None or tuple(keys) != tuple(kind._fields):
            raise ValueError(f"the namedtuple {name!r} has the fields {kind._fields}, but the "
                             f"structure has {keys}")
    else:
        raise ValueError(f"unknown structure kind {str(kind)[:80]!r}")
    keys = None if keys is None else tuple(keys)
    return Tree(kind, keys, [_tree_from_json(c, types, depth + 1) for c in children])
