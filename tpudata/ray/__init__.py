"""Ray bridge (optional extra ``tpudata[ray]``): imports Ray; tpudata itself never does.

- :func:`read_tfrecords` / :class:`TFRecordDatasource`: a Ray Data datasource for TFRecord
  shards, CRCs checked, parsed with tf.io-style specs, without TensorFlow.
- :class:`RayExecutor`: a ``concurrent.futures.Executor`` on Ray tasks, for
  ``ds.distribute(RayExecutor())`` (docs/remote.md).
"""

from tpudata.ray.datasource import TFRecordDatasource, read_tfrecords
from tpudata.ray.executor import RayExecutor

__all__ = ["RayExecutor", "TFRecordDatasource", "read_tfrecords"]
