"""Light helpers that worker processes of the JAX tests import (no jax, no pytest)."""


def encode_item(i):
    return str(i).encode()
