"""Converters from common dataset layouts to sharded TFRecord datasets.

- :func:`convert_imagenet`: ImageNet's ``train/<synset>/*.JPEG``, ``validation/*.JPEG`` and
  ``synset_labels.txt`` -> ``train-00000-of-01024`` ..., as TensorFlow's ``imagenet_to_gcs.py``.
- :func:`convert_image_folder`: ``root/<class>/<image>`` -> image Examples.
- :func:`convert_npz` / :func:`convert_arrays`: arrays with a common first dimension -> one
  Example per row; :func:`load_arrays` reads them back.

Image conversion needs Pillow (``pip install 'tpudata[images]'``); it is imported only when an
image is converted.
"""

from tpudata.convert.arrays import convert_arrays, convert_npz, load_arrays
from tpudata.convert.folder import convert_image_folder, scan_image_folder
from tpudata.convert.imagenet import convert_imagenet, scan_imagenet
from tpudata.convert.images import IMAGE_FEATURES, ImageExampleEncoder, ImageItem, normalize_image

__all__ = [
    "IMAGE_FEATURES",
    "ImageExampleEncoder",
    "ImageItem",
    "convert_arrays",
    "convert_image_folder",
    "convert_imagenet",
    "convert_npz",
    "load_arrays",
    "normalize_image",
    "scan_image_folder",
    "scan_imagenet",
]
