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


def tree_to_json(tree: Tree):
    """A JSON form of ``tree`` (namedtuples are saved by their module and name)."""
    if tree.kind == "leaf":
        return "*"
    kind = tree.kind
    if not isinstance(kind, str):
        kind = f"namedtuple:{kind.__module__}:{kind.__qualname__}"
    return {"kind": kind, "keys": None if tree.keys is None else list(tree.keys),
            "children": [tree_to_json(c) for c in tree.children]}


def tree_from_json(obj) -> Tree:
    """Inverse of :func:`tree_to_json`."""
    if obj == "*":
        return LEAF
    kind = obj["kind"]
    if kind.startswith("namedtuple:"):
        import importlib

        _, module, name = kind.split(":", 2)
        kind = importlib.import_module(module)
        for part in name.split("."):
            kind = getattr(kind, part)
    keys = None if obj["keys"] is None else tuple(obj["keys"])
    return Tree(kind, keys, [tree_from_json(c) for c in obj["children"]])
