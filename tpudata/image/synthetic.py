"""Photo-like test images: smooth shading, edges, texture and sensor noise (numpy only).

Used by the benchmarks and the golden-file script (which loads this file by path, without importing
tpudata), so it imports nothing but numpy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["photo_like"]


def photo_like(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A ``(height, width, 3)`` uint8 image that compresses like a photograph (~0.55 bytes/pixel at q90).

    >>> photo_like(np.random.default_rng(0), 4, 6).shape
    (4, 6, 3)
    """
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    yy /= max(height, 1)
    xx /= max(width, 1)
    img = np.zeros((height, width, 3), np.float32)
    for c in range(3):  # low-frequency shading
        a, b, p, q = rng.uniform(-1, 1, 4)
        img[..., c] = 120 + 60 * np.sin(3 * a * xx + 2 * b * yy + p) * np.cos(2 * q * xx - a * yy)
    for _ in range(int(rng.integers(6, 14))):  # objects with hard edges and their own texture
        cy, cx = rng.uniform(0, 1, 2)
        ry, rx = rng.uniform(0.05, 0.35, 2)
        mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1.0
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        freq = rng.uniform(10, 60)
        texture = 25 * np.sin(freq * (xx * rng.uniform(-1, 1) + yy * rng.uniform(-1, 1)) * 6.28)
        img[mask] = colour + texture[mask, None]
    img += rng.normal(0, 20.0, img.shape).astype(np.float32)  # grain
    return np.clip(img, 0, 255).astype(np.uint8)
