"""The device side of the JAX backend: model_fn traced under jax.grad, optimizers as pure functions.

A parameter is the pytree entry ``params[name]`` for every ``get_variable(name, ...)`` the
model_fn makes; its initial value is the numpy store's (same seed, same initializer), so both
backends start from the same weights. The optimizers are the numpy ones (SGD, Momentum, Adam:
the same formulas and slot names, so checkpoints move between backends), rewritten as pure
functions of ``(params, grads, slots, step)``. One difference: ``jax.grad`` gives every parameter a
gradient (zero for one the TRAIN loss does not read), so Momentum and Adam still move such a
parameter with their slots, where the numpy backend updates only the variables it got gradients for.
"""

from __future__ import annotations

import logging
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from tpudata.tpu.optimizers import SGD, Adam, CrossShardOptimizer, Momentum, Optimizer, TrainOp
from tpudata.tpu.spec import ModeKeys, TPUEstimatorSpec
from tpudata.tpu.summaries import _host_call_fn, _name
from tpudata.tpu.variables import VariableStore, scope

logger = logging.getLogger(__name__)

AXIS = "replica"


class TracedVariables:
    """What get_variable reads while model_fn is traced.

    With ``params=None`` (the init trace) missing variables are created in the numpy ``store``
    (the numpy backend's initial values) and returned as constants; otherwise the traced
    ``params[name]`` is returned and a new name is an error, as on the numpy backend.
    """

    def __init__(self, store: VariableStore, params: dict | None):
        self.store = store
        self.params = params

    def lookup(self, name: str, shape, dtype, initializer):
        if self.params is None:
            values = self.store.values[0]
            if name not in values:
                if self.store.frozen:
                    raise ValueError(f"variable {name!r} created after the first step; create "
                                     "every variable on every call of model_fn")
                if shape is None:
                    raise ValueError(f"variable {name!r} does not exist yet: give its shape")
                self.store.create(name, shape, dtype, initializer)
            value = jnp.asarray(values[name])
        else:
            if name not in self.params:
                raise ValueError(f"variable {name!r} created after the first step; create every "
                                 "variable on every call of model_fn")
            value = self.params[name]
        if shape is not None and tuple(value.shape) != tuple(shape):
            raise ValueError(f"variable {name!r} has shape {tuple(value.shape)}, requested "
                             f"{tuple(shape)}")
        return value


def call_model(model_fn: Callable, variables: TracedVariables, features, labels, mode: str,
               params: dict) -> TPUEstimatorSpec:
    with scope(variables):
        spec = model_fn(features, labels, mode, params)
    if not isinstance(spec, TPUEstimatorSpec):
        raise TypeError("model_fn must return a TPUEstimatorSpec")
    return spec


def train_optimizer(spec: TPUEstimatorSpec, default: Optimizer | None, num_replicas: int) -> Optimizer:
    """The optimizer a TRAIN spec asks for, under the same rules as the numpy backend."""
    if spec.loss is None:
        raise ValueError("in TRAIN mode model_fn must return a loss")
    if isinstance(spec.train_op, TrainOp):
        if spec.train_op.gradients is not None:
            raise ValueError("with backend='jax' gradients come from jax.grad of the loss: return "
                             "train_op=optimizer.minimize(loss) without gradients")
        optimizer = spec.train_op.optimizer
    elif spec.train_op is None and default is not None:
        optimizer = default
    else:
        raise ValueError("in TRAIN mode model_fn must return train_op=optimizer.minimize(loss) "
                         "(or give TPUEstimator(optimizer=...))")
    if not isinstance(optimizer, CrossShardOptimizer) and num_replicas > 1:
        raise ValueError("CrossShardOptimizer must be used for model training on TPUs: wrap "
                         "the optimizer (tpudata.tpu.CrossShardOptimizer(SGD(...)))")
    inner = optimizer.optimizer if isinstance(optimizer, CrossShardOptimizer) else optimizer
    if not isinstance(inner, (SGD, Momentum, Adam)):
        raise TypeError(f"backend='jax' runs SGD, Momentum and Adam, not {type(inner).__name__}")
    return optimizer


def slot_names(optimizer: Optimizer, name: str) -> list[str]:
    inner = optimizer.optimizer if isinstance(optimizer, CrossShardOptimizer) else optimizer
    if isinstance(inner, Momentum):
        return [f"{name}/momentum"]
    if isinstance(inner, Adam):
        return [f"{name}/m", f"{name}/v"]
    return []


def init_slots(optimizer: Optimizer, values: dict, saved: dict) -> dict:
    """Every slot of ``optimizer`` for ``values`` (numpy), from ``saved`` where a checkpoint had it."""
    out = {}
    for name, var in values.items():
        for slot in slot_names(optimizer, name):
            out[slot] = np.array(saved[slot]) if slot in saved else np.zeros_like(var)
    return out


def all_reduce(optimizer: Optimizer, grads: dict) -> dict:
    """CrossShardOptimizer's all-reduce across the replica axis (inside shard_map)."""
    if not isinstance(optimizer, CrossShardOptimizer):
        return grads
    if optimizer.reduction == "mean":
        return jax.lax.pmean(grads, AXIS)
    return jax.lax.psum(grads, AXIS)


def apply_updates(optimizer: Optimizer, params: dict, grads: dict, slots: dict, step):
    """``(params, slots)`` after one update; the numpy optimizers' formulas, as pure functions."""
    inner = optimizer.optimizer if isinstance(optimizer, CrossShardOptimizer) else optimizer
    new_params, new_slots = {}, dict(slots)
    for name, var in params.items():
        grad = grads[name].astype(var.dtype)
        if isinstance(inner, SGD):
            var = var - inner.learning_rate * grad
        elif isinstance(inner, Momentum):
            acc = slots[f"{name}/momentum"] * inner.momentum + grad
            new_slots[f"{name}/momentum"] = acc
            step_dir = grad + inner.momentum * acc if inner.nesterov else acc
            var = var - inner.learning_rate * step_dir
        else:  # Adam
            t = (step + 1).astype(jnp.float32)
            m = slots[f"{name}/m"] * inner.beta1 + (1 - inner.beta1) * grad
            v = slots[f"{name}/v"] * inner.beta2 + (1 - inner.beta2) * grad * grad
            new_slots[f"{name}/m"], new_slots[f"{name}/v"] = m, v
            lr = inner.learning_rate * jnp.sqrt(1 - inner.beta2 ** t) / (1 - inner.beta1 ** t)
            var = var - (lr * m / (jnp.sqrt(v) + inner.epsilon)).astype(var.dtype)
        new_params[name] = var
    return new_params, new_slots


def _squeeze(tree):
    return jax.tree_util.tree_map(lambda a: a[0], tree)


def _expand(tree):
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], tree)


def diverged(params: dict) -> dict:
    """Per parameter, whether any replica's copy differs from another's in any bit (inside
    shard_map): the max and min over replicas of the bits, read as integers, agree otherwise."""
    out = {}
    for name, value in params.items():
        kind = {1: jnp.int8, 2: jnp.int16, 4: jnp.int32}.get(value.dtype.itemsize)
        bits = jax.lax.bitcast_convert_type(value, kind) if kind is not None else value
        out[name] = jnp.any(jax.lax.pmax(bits, AXIS) != jax.lax.pmin(bits, AXIS))
    return out


def host_call_tensors(spec: TPUEstimatorSpec, captured: dict):
    """The spec's ``host_call`` tensors as jax arrays (None without one); its function goes to
    ``captured["host_fn"]`` (it runs on the host). Checked as on the numpy backend."""
    if spec.host_call is None:
        return None
    captured["host_fn"] = _host_call_fn(spec.host_call)
    tensors = spec.host_call[1]
    if isinstance(tensors, dict):
        named = list(tensors.items())
    elif isinstance(tensors, (list, tuple)):
        named = list(enumerate(tensors))
    else:
        named = [(0, tensors)]
    for name, value in named:
        if jnp.ndim(value) < 1:
            raise ValueError(
                f"host_call {_name(captured['host_fn'])}: tensor {name!r} has no batch dimension "
                f"(shape {jnp.shape(value)}); all tensors sent to the host keep one (reshape "
                "scalars to [1])")
    return jax.tree_util.tree_map(jnp.asarray, tensors)


def make_train_loop(model_fn: Callable, store: VariableStore, model_params: dict,
                    optimizer: Optimizer, on_trace: Callable[[], None],
                    captured: dict | None = None) -> Callable:
    """One replica's device loop: the first ``count`` of the stacked infeed's ``L`` steps.

    Arguments and results carry a leading replica axis of 1 (shard_map's block of the
    ``[num_replicas, ...]`` arrays): ``(params, slots, step, count, features[1, L, ...],
    labels)`` -> ``(params, slots, step + count, losses[1, L], diverged, host_call)``; ``step``,
    ``count`` and ``diverged`` (per parameter: do the replicas' copies differ in any bit?) are
    replicated. ``host_call`` is the spec's ``host_call`` tensors of every step, each
    ``[1, L, batch, ...]`` (rows past ``count`` are zeros), or None without a host_call; its
    function goes to ``captured["host_fn"]``. ``count`` is a runtime value (a ``lax.fori_loop``
    that lowers to a while loop, as TPUEstimator's device loop), so a shorter final loop runs the
    same program.
    """
    captured = {} if captured is None else captured

    def forward(params, features, labels):
        spec = call_model(model_fn, TracedVariables(store, params), features, labels,
                          ModeKeys.TRAIN, model_params)
        return jnp.asarray(spec.loss, jnp.float32), host_call_tensors(spec, captured)

    def one_step(carry, batch):
        params, slots, step = carry
        features, labels = batch
        (loss, host), grads = jax.value_and_grad(lambda p: forward(p, features, labels),
                                                 has_aux=True)(params)
        grads = all_reduce(optimizer, grads)
        params, slots = apply_updates(optimizer, params, grads, slots, step)
        return (params, slots, step + 1), loss, host

    def loop(params, slots, step, count, features, labels):
        on_trace()
        stacked = (_squeeze(features), _squeeze(labels))
        length = jax.tree_util.tree_leaves(stacked)[0].shape[0]
        params = _squeeze(params)

        def index(i):
            return jax.tree_util.tree_map(
                lambda a: jax.lax.dynamic_index_in_dim(a, i, 0, keepdims=False), stacked)

        # the host_call's shapes (model_fn traced abstractly once more), for its [L, ...] buffers
        shapes = jax.eval_shape(lambda p, b: forward(p, *b)[1], params, index(0))
        buffers = jax.tree_util.tree_map(lambda s: jnp.zeros((length,) + s.shape, s.dtype), shapes)

        def body(i, carry):
            params, slots, step, losses, buffers = carry
            (params, slots, step), loss, host = one_step((params, slots, step), index(i))
            buffers = jax.tree_util.tree_map(lambda b, h: b.at[i].set(h), buffers, host)
            return params, slots, step, losses.at[i].set(loss), buffers

        carry = (params, _squeeze(slots), step, jnp.zeros((length,), jnp.float32), buffers)
        params, slots, step, losses, buffers = jax.lax.fori_loop(0, count, body, carry)
        return (_expand(params), _expand(slots), step, losses[None], diverged(params),
                _expand(buffers))

    return loop


def make_forward(model_fn: Callable, store: VariableStore, model_params: dict, mode: str,
                 captured: dict, on_trace: Callable[[], None]) -> Callable:
    """One replica's EVAL/PREDICT step: ``(params, features[1, ...], labels)`` -> outputs[1, ...].

    ``captured`` receives the host-side parts of the spec (metric_fn, host_fn) at trace time.
    """

    def forward(params, features, labels):
        on_trace()
        spec = call_model(model_fn, TracedVariables(store, _squeeze(params)), _squeeze(features),
                          _squeeze(labels), mode, model_params)
        out = {}
        if mode == ModeKeys.EVAL:
            out["loss"] = jnp.asarray(0.0 if spec.loss is None else spec.loss, jnp.float32)
            if spec.eval_metrics is not None:
                captured["metric_fn"] = spec.eval_metrics[0]
                out["metrics"] = spec.eval_metrics[1]
            host = host_call_tensors(spec, captured)
            if host is not None:
                out["host_call"] = host
        else:
            if spec.predictions is None:
                raise ValueError("in PREDICT mode model_fn must return predictions=")
            out["predictions"] = spec.predictions
        return _expand(out)

    return forward
