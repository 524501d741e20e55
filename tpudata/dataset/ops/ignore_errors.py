"""ignore_errors: drop the elements that fail upstream instead of raising.

tf.data's ``Dataset.ignore_errors()``. Here it applies to the errors that leave a pipeline
able to go on: a ``map`` function that raises drops that element, and a damaged TFRecord file
is read up to the bad record, the rest of it skipped. Each skip is logged as a warning (the
file and byte offset for TFRecord files, the op and the error for map). Other errors (a
``filter`` predicate or a generator raising, a missing file) still raise.

>>> from tpudata.dataset import Dataset
>>> [int(x) for x in Dataset.range(5).map(lambda x: 10 // int(x - 2)).ignore_errors()]
[-5, -10, 10, 5]
"""

from __future__ import annotations

from tpudata.dataset.core import registry
from tpudata.dataset.core.common import _Unary, input_spec


class IgnoreErrorsDataset(_Unary):
    def __init__(self, input_ds, log_warning: bool = True):
        super().__init__(input_ds)
        self.log_warning = bool(log_warning)

    def _make_iterator(self, ctx):
        return self.input._make_iterator(ctx.with_ignore_errors())

    def _spec(self):
        return input_spec(self.input)


__all__ = ["IgnoreErrorsDataset"]

registry.provide(IgnoreErrorsDataset)
