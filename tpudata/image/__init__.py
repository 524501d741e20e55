"""tpudata.image: the image ops of TPU input pipelines (tf.image / tf.io equivalents) and presets.

Optional extra: ``pip install 'tpudata[image]'`` (Pillow, ml_dtypes). JPEG decoding and the batch
preprocessing kernel use the system libjpeg-turbo through ``tpudata.image._imgkernel`` (built at
install time where ``jpeglib.h`` exists; otherwise a numpy/Pillow reference path, with a warning).

>>> import numpy as np, tpudata.image as ti
>>> ti.resize(np.zeros((4, 6, 3), np.uint8), (2, 3)).shape
(2, 3, 3)
"""

from tpudata._outpool import release_batch_memory
from tpudata.image.decode import (
    decode_and_crop_jpeg,
    decode_image,
    decode_jpeg,
    decode_png,
    extract_jpeg_shape,
    is_jpeg,
    is_png,
)
from tpudata.image.ops import (
    central_crop,
    convert_image_dtype,
    flip_left_right,
    normalize,
    random_flip_left_right,
    sample_crop_window,
    sample_distorted_bounding_box,
    to_bfloat16,
)
from tpudata.image.presets import (
    IMAGENET_MEAN,
    IMAGENET_STDDEV,
    inception_preprocess,
    inception_preprocess_batch,
    preprocess_batch,
    resnet_preprocess,
    resnet_preprocess_batch,
)
from tpudata.image.resize import (
    resize,
    resize_area,
    resize_bicubic,
    resize_bilinear,
    resize_nearest_neighbor,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STDDEV",
    "central_crop",
    "convert_image_dtype",
    "decode_and_crop_jpeg",
    "decode_image",
    "decode_jpeg",
    "decode_png",
    "extract_jpeg_shape",
    "flip_left_right",
    "inception_preprocess",
    "inception_preprocess_batch",
    "is_jpeg",
    "is_png",
    "normalize",
    "preprocess_batch",
    "random_flip_left_right",
    "release_batch_memory",
    "resize",
    "resize_area",
    "resize_bicubic",
    "resize_bilinear",
    "resize_nearest_neighbor",
    "resnet_preprocess",
    "resnet_preprocess_batch",
    "sample_crop_window",
    "sample_distorted_bounding_box",
    "to_bfloat16",
]
