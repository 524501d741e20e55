"""batch, padded_batch and unbatch.

A batch element is stored as a block of one element whose columns have the batch as their
second dimension (``[1, B, ...]`` arrays), or as an object column holding the batch's
:class:`VarLenValues` / :class:`RecordColumn` (so ``.parse`` after ``.batch`` parses the whole
batch straight from the read buffers).

Exact-epoch evaluation (``pad_remainder=True``) pads the final batch and adds a float32 mask:

>>> ds = Dataset.from_tensor_slices({"x": np.arange(5)}).batch(4, pad_remainder=True)
>>> [(b["x"].tolist(), b["weight"].tolist()) for b in ds]
[([0, 1, 2, 3], [1.0, 1.0, 1.0, 1.0]), ([4, 0, 0, 0], [1.0, 0.0, 0.0, 0.0])]
"""

from __future__ import annotations

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import INFINITE, UNKNOWN, BlockIterator, Cursor, Dataset
from tpudata.dataset.core.iterator import BLOCK_WANT
from tpudata.dataset.core.block import Block, RecordColumn, leaf_concat, leaf_items
from tpudata.dataset.core.nest import flatten, leaf_paths, map_structure, unflatten
from tpudata.errors import BatchError
from tpudata.example.parse import VarLenValues

_SCALARS = (bytes, str, int, float, bool, complex, np.generic)


def _item_shape(v):
    """An element's shape and dtype for the batch check; None: not a tensor (kept as it is)."""
    if type(v) is np.ndarray:
        return v.shape, v.dtype
    if isinstance(v, _SCALARS):
        return (), None
    if type(v) is list:  # ragged nested lists that as_column could not stack
        try:
            a = np.asarray(v)
        except ValueError:
            return None
        return (a.shape, a.dtype) if a.dtype != object else None
    return None


def _shape_text(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def stack_rows(block: Block, first: int, op: str) -> Block:
    """``block``'s elements made into one batch's columns, as tf.data stacks them.

    Object columns hold elements that as_column could not stack: bytes and str scalars (a string
    tensor, kept as it is), per-element objects such as VarLenValues (kept), and arrays of
    different shapes or dtypes, which tf.data refuses to batch: raise :class:`BatchError` naming
    the component, the input elements and their shapes. Arrays of one shape and dtype (e.g.
    string vectors, object arrays that as_column keeps per element) are stacked into one
    ``[n, ...]`` array. ``first`` is the input element number of the block's first element.
    """
    leaves = block.leaves
    out = None
    for k, col in enumerate(leaves):
        if type(col) is not np.ndarray or col.dtype != object or col.ndim != 1 or len(col) < 1:
            continue
        items = col.tolist()
        if all(type(v) is bytes or type(v) is str for v in items):
            continue  # the common case: a string tensor
        shapes = [_item_shape(v) for v in items]
        if any(s is None for s in shapes):
            continue
        shape0, dtype0 = shapes[0]
        for i, (shape, dtype) in enumerate(shapes):
            if shape != shape0:
                raise _batch_error(op, block, k, first, i, "shape", _shape_text(shape0),
                                   _shape_text(shape))
        if not shape0:
            continue  # scalars (e.g. Python numbers of several types): kept as before
        dtypes = {d for _, d in shapes}
        if len(dtypes) > 1:
            i = next(i for i, (_, d) in enumerate(shapes) if d != dtype0)
            raise _batch_error(op, block, k, first, i, "dtype", str(dtype0), str(shapes[i][1]))
        if out is None:
            out = list(leaves)
        out[k] = np.stack([np.asarray(v) for v in items])
    return block if out is None else Block(block.tree, out, block.n, block.origin)


def _batch_error(op: str, block: Block, k: int, first: int, i: int, what: str, a: str,
                 b: str) -> BatchError:
    name = leaf_paths(block.tree)[k]
    where = f"component {k}" + ("" if name == "<element>" else f" ({name!r})")
    fix = ("pad them to one shape with padded_batch() (or map() each element to one shape; "
           "elements that are batches of different sizes: unbatch() them first)"
           if what == "shape" else "cast them to one dtype in a map() before batching")
    return BatchError(
        f"{op}: cannot batch tensors with different {what}s in {where}: the batch's first "
        f"element (input element {first}) has {what} {a} and its element {i} (input element "
        f"{first + i}) has {what} {b}; {fix}", component=name, index=first + i)


def _pad_leaf(col, pad: int):
    """``col`` followed by ``pad`` zero / empty rows."""
    if pad == 0:
        return col
    if isinstance(col, RecordColumn):
        return leaf_concat([col, RecordColumn.from_bytes([b""] * pad)])
    if isinstance(col, VarLenValues):
        splits = np.concatenate([col.row_splits, np.full(pad, col.row_splits[-1], np.int64)])
        return VarLenValues(col.values, splits)
    if col.dtype == object:
        sample = next((v for v in col.ravel().tolist() if v is not None), b"")
        filler = type(sample)() if isinstance(sample, (bytes, str)) else None
        extra = np.empty((pad,) + col.shape[1:], dtype=object)
        extra.fill(filler)
        return np.concatenate([col, extra])
    return np.concatenate([col, np.zeros((pad,) + col.shape[1:], dtype=col.dtype)])


def _as_batch_column(col) -> object:
    """One batch (a column of B rows) stored as the single element of a column."""
    if isinstance(col, np.ndarray):
        return col[None]
    holder = np.empty(1, dtype=object)
    holder[0] = col
    return holder


def _add_mask(tree, leaves: list, mask: np.ndarray, key: str):
    structure = unflatten(tree, leaves)
    target = structure
    if isinstance(structure, tuple) and structure and isinstance(structure[0], dict):
        target = structure[0]  # (features, labels): the mask goes with the features
    if not isinstance(target, dict):
        raise TypeError(
            "pad_remainder adds a mask entry to each element, so elements must be dicts "
            f"(or (features_dict, labels) tuples), not {tree}")
    if key in target:
        raise ValueError(f"elements already have a {key!r} entry; pass another mask_key")
    target[key] = mask
    return flatten(structure)


class BatchDataset(Dataset):
    def __init__(self, input_ds: Dataset, batch_size: int, drop_remainder: bool = False,
                 pad_remainder: bool = False, mask_key: str = "weight",
                 num_batches: int | None = None):
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        if drop_remainder and pad_remainder:
            raise ValueError("choose drop_remainder or pad_remainder, not both")
        if num_batches is not None and not pad_remainder:
            raise ValueError("num_batches pads with zero-weight batches: it needs pad_remainder=True")
        self.input = input_ds
        self.batch_size = int(batch_size)
        self.drop_remainder = drop_remainder
        self.pad_remainder = pad_remainder
        self.mask_key = mask_key
        self.num_batches = None if num_batches is None else int(num_batches)

    def _make_iterator(self, ctx):
        return _BatchIterator(self, self.input._make_iterator(ctx))

    def _spec(self):
        from tpudata.dataset.core.spec import TensorSpec, _batched, _static

        inner = _static(self.input)
        if inner is None:
            return None
        dim = self.batch_size if (self.drop_remainder or self.pad_remainder) else None
        out = map_structure(lambda s: _batched(s, dim), inner)
        if self.pad_remainder:
            target = out[0] if isinstance(out, tuple) else out
            if isinstance(target, dict):
                target[self.mask_key] = TensorSpec((dim,), np.dtype(np.float32))
        return out

    def cardinality(self):
        return self.batches_of(self.input.cardinality())

    def batches_of(self, c: int) -> int:
        """How many batches this op makes of ``c`` input elements (INFINITE/UNKNOWN as they are)."""
        if self.num_batches is not None:
            return self.num_batches
        if c < 0:
            return c
        return c // self.batch_size if self.drop_remainder else -(-c // self.batch_size)


class _BatchIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: BatchDataset, input_it: BlockIterator):
        self.ds = ds
        self.input_it = input_it
        self.cursor = Cursor(input_it)
        self.produced = 0
        self.template: Block | None = None  # for all-padding batches

    def _finish(self, block: Block, real: int) -> Block:
        B = self.ds.batch_size
        leaves = [_pad_leaf(c, B - real) for c in block.leaves]
        tree = block.tree
        if self.ds.pad_remainder:
            mask = np.zeros(B, dtype=np.float32)
            mask[:real] = 1.0
            tree, leaves = _add_mask(tree, leaves, mask, self.ds.mask_key)
        self.produced += 1
        return Block(tree, [_as_batch_column(c) for c in leaves], 1)

    def next(self):
        return self._complete(self.cursor.take(self.ds.batch_size))

    def _complete(self, block: Block | None) -> Block | None:
        """The batch made of ``block``: the next ``batch_size`` input elements (fewer at the end of
        the input, None past it)."""
        B = self.ds.batch_size
        limit = self.ds.num_batches
        if block is not None:
            block = stack_rows(block, self.produced * B, f"batch({B})")
            if limit is not None and self.produced >= limit:
                raise ValueError(
                    f"the input has more than num_batches={limit} batches of {B}; num_batches "
                    "must be at least ceil(records on this host / batch_size)")
            if self.template is None:
                self.template = block.slice(0, 1)
            if block.n == B:
                return self._finish(block, B)
            if self.ds.drop_remainder:
                return None
            if self.ds.pad_remainder:
                return self._finish(block, block.n)
            self.produced += 1
            return Block(block.tree, [_as_batch_column(c) for c in block.leaves], 1)
        if limit is not None and self.produced < limit:
            if self.template is None:
                self.template = _empty_from_spec(self.ds.input)
            return self._finish(self.template.slice(0, 0), 0)
        return None

    def get_state(self):
        return {"cursor": self.cursor.get_state(), "produced": self.produced,
                "seen_data": self.template is not None}

    def set_state(self, state):
        self.cursor.set_state(state["cursor"])
        self.produced = int(state["produced"])
        # the padding template is one element's structure and shapes: read it again if needed
        self.template = _first_element(self.ds.input) if state["seen_data"] else None

    def close(self):
        self.input_it.close()


def _empty_from_spec(ds: Dataset) -> Block:
    """A block of zero elements shaped like ``ds``'s static element spec."""
    from tpudata.dataset.core.spec import VarLenSpec, _static

    spec = _static(ds)
    if spec is None:
        raise ValueError(
            "this host has no elements and the element shapes are not static, so its zero-weight "
            "batches cannot be built; parse with fixed-shape specs or give every host a record")
    tree, leaves = flatten(spec)
    cols = []
    for leaf in leaves:
        if isinstance(leaf, VarLenSpec):
            cols.append(VarLenValues(np.empty(0, dtype=leaf.dtype), np.zeros(1, dtype=np.int64)))
        elif any(d is None for d in leaf.shape):
            raise ValueError(f"cannot pad an element of unknown shape {leaf.shape}")
        else:
            cols.append(np.empty((0,) + tuple(leaf.shape), dtype=leaf.dtype))
    return Block(tree, cols, 0)


def _first_element(ds: Dataset) -> Block | None:
    """The first element of ``ds`` as a block (from a fresh iterator)."""
    from tpudata.dataset.core.base import IterContext

    it = ds._make_iterator(IterContext((0,)))
    try:
        return Cursor(it).take(1)
    finally:
        it.close()


class PaddedBatchDataset(Dataset):
    def __init__(self, input_ds, batch_size: int, padded_shapes=None, padding_values=None,
                 drop_remainder: bool = False):
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        self.input = input_ds
        self.batch_size = int(batch_size)
        self.padded_shapes = padded_shapes
        self.padding_values = padding_values
        self.drop_remainder = drop_remainder

    def _make_iterator(self, ctx):
        return _PaddedBatchIterator(self, self.input._make_iterator(ctx))

    def _spec(self):
        """TF's: the padded shapes (or the input's, unknown dimensions staying unknown)."""
        from tpudata.dataset.core.spec import TensorSpec, VarLenSpec, _static

        inner = _static(self.input)
        if inner is None:
            return None
        tree, leaves = flatten(inner)
        if any(isinstance(x, VarLenSpec) for x in leaves):
            return None
        shapes = [None] * len(leaves)
        if self.padded_shapes is not None:
            shapes = flatten(self.padded_shapes)[1] if tree.kind != "leaf" else [self.padded_shapes]
        dim = self.batch_size if self.drop_remainder else None
        out = []
        for spec, shape in zip(leaves, shapes):
            if shape is None:
                dims = list(spec.shape)
            else:
                shape = [shape] if isinstance(shape, (int, np.integer)) else list(shape)
                if len(shape) != len(spec.shape):
                    return None  # the iterator explains the mismatch
                dims = [None if d is None or int(d) == -1 else int(d) for d in shape]
            out.append(TensorSpec((dim, *dims), spec.dtype))
        return unflatten(tree, out)

    def cardinality(self):
        c = self.input.cardinality()
        if c < 0:
            return c
        return c // self.batch_size if self.drop_remainder else -(-c // self.batch_size)


def _pad_to(values: list, shape, fill, dtype) -> np.ndarray:
    arrays = [np.asarray(v) for v in values]
    ndim = arrays[0].ndim if arrays else 0
    if shape is None:
        shape = [None] * ndim
    shape = [shape] if isinstance(shape, (int, np.integer)) else list(shape)
    if len(shape) != ndim:
        raise ValueError(f"padded shape {shape} does not match elements of rank {ndim}")
    target = []
    for d, want in enumerate(shape):
        longest = max(a.shape[d] for a in arrays)
        if want is None or want == -1:
            target.append(longest)
        elif longest > want:
            raise ValueError(f"an element has size {longest} in dimension {d}, more than the "
                             f"padded shape {want}")
        else:
            target.append(int(want))
    if dtype is None:
        dtype = arrays[0].dtype
    out = np.full([len(arrays)] + target, fill if fill is not None else
                  (b"" if dtype == object else 0), dtype=dtype)
    for i, a in enumerate(arrays):
        out[(i,) + tuple(slice(0, s) for s in a.shape)] = a
    return out


class _PaddedBatchIterator(BlockIterator):
    exact_want = True  # never more elements than asked for

    def __init__(self, ds: PaddedBatchDataset, input_it):
        self.ds = ds
        self.input_it = input_it
        self.cursor = Cursor(input_it)

    def next(self):
        block = self.cursor.take(self.ds.batch_size)
        if block is None or (self.ds.drop_remainder and block.n < self.ds.batch_size):
            return None
        tree = block.tree
        shapes = [None] * len(block.leaves)
        fills = [None] * len(block.leaves)
        if self.ds.padded_shapes is not None:
            shapes = flatten(self.ds.padded_shapes)[1] if tree.kind != "leaf" else [self.ds.padded_shapes]
        if self.ds.padding_values is not None:
            fills = flatten(self.ds.padding_values)[1] if tree.kind != "leaf" else [self.ds.padding_values]
            if len(fills) == 1 and len(block.leaves) > 1:
                fills = fills * len(block.leaves)
        cols = []
        for col, shape, fill in zip(block.leaves, shapes, fills):
            values = leaf_items(col)
            dtype = object if values and isinstance(values[0], (bytes, str)) else None
            cols.append(_as_batch_column(_pad_to(values, shape, fill, dtype)))
        return Block(tree, cols, 1)

    def get_state(self):
        return {"cursor": self.cursor.get_state()}

    def set_state(self, state):
        self.cursor.set_state(state["cursor"])

    def close(self):
        self.input_it.close()


class UnbatchDataset(Dataset):
    def __init__(self, input_ds):
        super().__init__()
        self.input = input_ds

    def _make_iterator(self, ctx):
        return _UnbatchIterator(self.input._make_iterator(ctx))

    def cardinality(self):
        return UNKNOWN if self.input.cardinality() != INFINITE else INFINITE

    def _spec(self):
        """The input's spec less its leading (batch) dimension."""
        from tpudata.dataset.core.spec import RaggedSpec, SparseSpec, TensorSpec, VarLenSpec, _static

        inner = _static(self.input)
        if inner is None:
            return None
        tree, leaves = flatten(inner)
        out = []
        for leaf in leaves:
            if not isinstance(leaf, TensorSpec) or isinstance(leaf, (RaggedSpec, SparseSpec)) or \
                    not leaf.shape:
                return None  # nested datasets, sparse and ragged values, scalars: the data says
            out.append(TensorSpec(leaf.shape[1:], leaf.dtype) if isinstance(leaf, VarLenSpec) else
                       type(leaf)(leaf.shape[1:], leaf.dtype))
        return unflatten(tree, out)


class _UnbatchIterator(BlockIterator):
    def __init__(self, input_it):
        self.input_it = input_it

    def next(self):
        self.input_it.want = BLOCK_WANT  # whole batches: as many as there are
        block = self.input_it.next()
        if block is None:
            return None
        parts = []
        for i in range(block.n):
            cols = []
            for col in block.leaves:
                item = col[i]
                if isinstance(item, np.ndarray) and item.dtype == object and item.ndim == 0:
                    item = item.item()
                cols.append(item)
            parts.append(Block(block.tree, cols))
        return Block.concat(parts) if parts else None

    def get_state(self):
        return self.input_it.get_state()

    def set_state(self, state):
        self.input_it.set_state(state)

    def close(self):
        self.input_it.close()

registry.provide(BatchDataset, PaddedBatchDataset, UnbatchDataset)
