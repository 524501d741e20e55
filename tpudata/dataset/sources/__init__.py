"""Dataset sources: in-memory tensors and ranges, record files (TFRecord, text lines, fixed-length), generators, counters, random values and saved datasets."""
