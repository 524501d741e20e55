"""Variables the estimator owns, one copy per replica, read inside model_fn with get_variable.

>>> store = VariableStore(num_replicas=2, seed=0)
>>> with store.replica(1):
...     w = get_variable("w", (2, 3), initializer=zeros)
>>> w.shape, w.flags.writeable
((2, 3), False)
"""

from __future__ import annotations

import contextlib
import contextvars
import zlib
from typing import Callable

import numpy as np

_current: contextvars.ContextVar = contextvars.ContextVar("tpudata_tpu_replica", default=None)


def zeros(shape, dtype, rng):
    return np.zeros(shape, dtype=dtype)


def ones(shape, dtype, rng):
    return np.ones(shape, dtype=dtype)


def constant(value) -> Callable:
    def init(shape, dtype, rng):
        return np.full(shape, value, dtype=dtype)

    return init


def glorot_uniform(shape, dtype, rng):
    fan_in = shape[0] if len(shape) >= 1 else 1
    fan_out = shape[1] if len(shape) >= 2 else fan_in
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(dtype)


def random_normal(stddev: float = 0.05) -> Callable:
    def init(shape, dtype, rng):
        return (rng.standard_normal(shape) * stddev).astype(dtype)

    return init


@contextlib.contextmanager
def scope(variables, index: int = 0):
    """Make ``variables`` what get_variable reads: a VariableStore (replica ``index``) or an
    object with ``lookup(name, shape, dtype, initializer)`` (the JAX backend's traced params)."""
    token = _current.set((variables, index))
    try:
        yield
    finally:
        _current.reset(token)


def current_backend() -> str | None:
    """"numpy" or "jax" inside a model_fn run by TPUEstimator, else None."""
    current = _current.get()
    if current is None:
        return None
    return "jax" if hasattr(current[0], "lookup") else "numpy"


class VariableStore:
    """Per-replica copies of every variable (identical unless something is wrong)."""

    def __init__(self, num_replicas: int, seed: int = 0):
        self.num_replicas = num_replicas
        self.seed = seed
        self.values: list[dict[str, np.ndarray]] = [{} for _ in range(num_replicas)]
        self.frozen = False  # no new variables after the first step ("compiled")
        self.version = 0  # bumped whenever values change outside a step (create, load)

    def replica(self, index: int):
        return scope(self, index)

    def create(self, name: str, shape, dtype, initializer) -> None:
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        value = np.asarray(initializer(tuple(shape), np.dtype(dtype), rng), dtype=dtype)
        if value.shape != tuple(shape):
            raise ValueError(f"initializer of {name!r} gave shape {value.shape}, not {tuple(shape)}")
        for r in range(self.num_replicas):  # broadcast the initial value to every replica
            self.values[r][name] = value.copy()
        self.version += 1

    def names(self) -> list[str]:
        return sorted(self.values[0])

    def state(self, replica: int = 0) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.values[replica].items()}

    def load(self, values: dict) -> None:
        for r in range(self.num_replicas):
            self.values[r] = {k: np.array(v) for k, v in values.items()}
        self.version += 1

    def check_identical(self) -> None:
        """Replicas must hold bit-identical variables (the all-reduce keeps them so)."""
        base = self.values[0]
        for r in range(1, self.num_replicas):
            for name, value in self.values[r].items():
                if not np.array_equal(value, base[name]):
                    raise RuntimeError(f"replica {r} diverged from replica 0 in variable {name!r}: "
                                       "were gradients applied without CrossShardOptimizer?")


def get_variable(name: str, shape=None, dtype=np.float32, initializer: Callable = zeros) -> np.ndarray:
    """This replica's value of variable ``name`` (created with ``initializer`` on first use).

    Only inside a model_fn that TPUEstimator runs. The array is read-only: return gradients and
    let the optimizer update it. Under ``backend="jax"`` it is the traced value of the parameter
    (gradients then come from ``jax.grad``).
    """
    current = _current.get()
    if current is None:
        raise RuntimeError("get_variable() works inside a model_fn run by TPUEstimator")
    store, replica = current
    if hasattr(store, "lookup"):
        return store.lookup(name, shape, dtype, initializer)
    values = store.values[replica]
    if name not in values:
        if store.frozen:
            raise ValueError(f"variable {name!r} created after the first step; create every "
                             "variable on every call of model_fn")
        if shape is None:
            raise ValueError(f"variable {name!r} does not exist yet: give its shape")
        store.create(name, shape, dtype, initializer)
    value = values[name]
    if shape is not None and value.shape != tuple(shape):
        raise ValueError(f"variable {name!r} has shape {value.shape}, requested {tuple(shape)}")
    view = value.view()
    view.setflags(write=False)
    return view
