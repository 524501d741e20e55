"""JsonLinesDataset: fields of JSON-lines files (local, gs:// or any fsspec URL; gzip/zlib).

>>> import json, fsspec
>>> with fsspec.open("memory://doc/a.jsonl", "w") as f:
...     _ = f.write(json.dumps({"text": "héllo", "id": 7}) + "\\n" + json.dumps({"text": "x", "id": 8}))
>>> [e for e in JsonLinesDataset("memory://doc/a.jsonl", fields=["id", "text"])]
[{'id': np.int64(7), 'text': b'h\\xc3\\xa9llo'}, {'id': np.int64(8), 'text': b'x'}]

Lines are read with ``TextLineDataset``'s reader; each is parsed with :func:`json.loads`. Text
comes out as UTF-8 bytes (as tf.string), integers as int64, floats as float64, lists of numbers
as arrays. A line that is not JSON (or not UTF-8) raises
:class:`~tpudata.errors.InvalidTextError` naming the file and line, or is dropped and logged
with ``skip_invalid=True``; a line without a field raises :class:`~tpudata.errors.SpecError`
naming them. Blank lines are skipped. State: the reader's (file, byte offset) and the line number.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

import numpy as np

from tpudata._keywords import storage_options_dict, strict_keywords
from tpudata.dataset.core.base import BlockIterator, Cursor, Dataset
from tpudata.dataset.core.block import Block, RecordColumn
from tpudata.dataset.core.nest import LEAF, flatten
from tpudata.dataset.sources.files import _globbed, _names, _TextLineFiles
from tpudata.errors import InvalidTextError, SpecError
from tpudata.text.position import state_after

logger = logging.getLogger("tpudata.text")

READ_LINES = 1024  # lines parsed at a time


def _value(v, field: str, path: str, line: int):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bool):
        return np.bool_(v)
    if isinstance(v, int):
        return np.int64(v)
    if isinstance(v, float):
        return np.float64(v)
    if isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                   for x in v):
        return np.asarray(v, dtype=np.int64 if all(isinstance(x, int) for x in v) else np.float64)
    kind = "null" if v is None else type(v).__name__
    raise SpecError(f"field {field!r} of {path}, line {line} is a JSON {kind}: JsonLinesDataset "
                    "reads strings, numbers and lists of numbers")


class _JsonLines(Dataset):
    def __init__(self, files: list[str], fields: tuple, single: bool, compression: str | None,
                 skip_invalid: bool, storage_options: dict | None):
        super().__init__()
        self.files, self.fields, self.single = files, fields, single
        self.compression, self.skip_invalid = compression, skip_invalid
        self.storage_options = storage_options
        self.lines = _TextLineFiles(files, compression, None, storage_options)

    def _make_iterator(self, ctx):
        return _JsonLinesIterator(self, self.lines._make_iterator(ctx))

    def _spec(self):
        return None  # the fields' types are known from the data only

    def parse(self, block: Block, path: str, first_line: int) -> tuple[Block | None, tuple | None]:
        """``(elements, bad)`` of a block of lines: ``bad`` is ``(k, error)`` for its first line
        that fails (the elements are those before it)."""
        col = block.leaves[0]
        lines = col.to_list() if isinstance(col, RecordColumn) else list(col)
        rows, bad = [], None
        for k, raw in enumerate(lines):
            if not raw.strip():
                continue
            line = first_line + k
            try:
                obj = json.loads(raw)
                if not isinstance(obj, dict):
                    raise ValueError(f"a JSON {type(obj).__name__}, not an object")
            except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
                message = f"{path}, line {line} is not a JSON object in UTF-8: {exc}"
                if not self.skip_invalid:
                    bad = k, InvalidTextError(message + "; skip_invalid=True drops such lines",
                                              path, f"line {line}")
                    break
                logger.warning("JsonLinesDataset: skipped %s", message)
                continue
            try:
                values = {f: _value(obj[f], f, path, line) for f in self.fields}
            except KeyError as exc:
                bad = k, SpecError(f"{path}, line {line} has no field {exc.args[0]!r} (its "
                                   f"fields: {sorted(obj)[:16]})")
                break
            except SpecError as exc:
                bad = k, exc
                break
            rows.append(values[self.fields[0]] if self.single else values)
        if not rows:
            return None, bad
        tree, _ = flatten(rows[0])
        if tree == LEAF:
            return Block.from_elements(LEAF, [[r] for r in rows]), bad
        return Block.from_elements(tree, [flatten(r)[1] for r in rows]), bad


class _JsonLinesIterator(BlockIterator):
    """Lines through a Cursor, so that the lines before a bad one are delivered (and a state
    taken then points at the bad line) before its error is raised."""

    def __init__(self, ds: _JsonLines, lines_it: BlockIterator):
        self.ds = ds
        self.lines_it = lines_it
        self.cursor = Cursor(lines_it)
        self.file = 0
        self.line = 0  # lines of file ``self.file`` read so far
        self.error: tuple | None = None  # (state at the bad line, its error)

    def next(self):
        if self.error is not None:
            raise self.error[1]
        while True:
            before = self.cursor.get_state()
            block = self.cursor.next_block(READ_LINES)
            if block is None:
                return None
            if self.lines_it.file != self.file:
                self.file, self.line = self.lines_it.file, 0
            first = self.line + 1
            out, bad = self.ds.parse(block, self.ds.files[self.file], first)
            self.line += block.n
            if bad is not None:
                k, error = bad
                self.error = {"cursor": state_after(before, k), "file": self.file,
                              "line": first - 1 + k}, error
                if out is None:
                    raise error
            if out is not None:
                return out

    def get_state(self):
        if self.error is not None:
            return self.error[0]
        return {"cursor": self.cursor.get_state(), "file": self.file, "line": self.line}

    def set_state(self, state):
        self.error = None
        self.cursor.set_state(state["cursor"])
        self.file, self.line = int(state["file"]), int(state["line"])

    def close(self):
        self.lines_it.close()


@strict_keywords
def JsonLinesDataset(filenames, fields: str | Sequence[str] = "text",
                     compression_type: str | None = None, skip_invalid: bool = False,
                     storage_options: Mapping | None = None) -> Dataset:
    """The ``fields`` of each line of JSON-lines files (globs expanded, in order): one field
    gives its value as the element, a list of fields a dict."""
    storage_options = storage_options_dict("JsonLinesDataset", storage_options)
    files = _globbed(_names(filenames), storage_options)
    single = isinstance(fields, str)
    names = (fields,) if single else tuple(fields)
    if not names or not all(isinstance(f, str) for f in names):
        raise ValueError(f"fields must be a field name or a list of them, not {fields!r}")
    return _JsonLines(files, names, single, compression_type, bool(skip_invalid), storage_options)


__all__ = ["JsonLinesDataset"]
