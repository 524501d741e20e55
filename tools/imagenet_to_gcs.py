#!/usr/bin/env python3
r"""Convert ImageNet to TFRecord shards on GCS: tensorflow/tpu's imagenet_to_gcs.py, with tpudata.

Same job and flags as the original (``--raw_data_dir``, ``--local_scratch_dir``,
``--gcs_output_path``, ``--nogcs_upload``, ``--project``), plus ``--num_train_shards`` (1024),
``--num_validation_shards`` (128) and ``--workers``; parallel, resumable, with a progress bar,
and written straight to ``gs://`` (no local copy). The raw data is laid out as::

    train/n03062245/n03062245_4620.JPEG
    validation/ILSVRC2012_val_00000001.JPEG
    synset_labels.txt

    python tools/imagenet_to_gcs.py --raw_data_dir=path/to/imagenet \
        --project=TEST_PROJECT --gcs_output_path=gs://TEST_BUCKET/IMAGENET_DIR
    python tools/imagenet_to_gcs.py --raw_data_dir=path/to/imagenet \
        --local_scratch_dir=/data/imagenet-tfrecords --nogcs_upload

Both write ``train-*`` and ``validation-*`` side by side (what the original uploads to GCS and
``imagenet_input.py`` reads from one ``data_dir``); the original leaves its scratch layout,
``train/`` and ``validation/`` sub-directories, with ``--nogcs_upload``: add ``--split_subdirs``
for that. The same command is ``tpudata convert imagenet ...``.
"""

import sys

from tpudata.commands.convert import imagenet_main

if __name__ == "__main__":
    sys.exit(imagenet_main())
