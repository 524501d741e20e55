"""Random-access data sources (``len``, ``source[i]``, batched ``__getitems__``).

A layer above :mod:`tpudata.shards` (counts come from the shards' manifests) and below
:mod:`tpudata.distribute`.
"""

from tpudata.source.tfrecord import INDEX_SUFFIX, TFRecordSource

__all__ = ["INDEX_SUFFIX", "TFRecordSource"]
