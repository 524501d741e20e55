"""numpy optimizers and CrossShardOptimizer, which all-reduces gradients across replicas.

>>> opt = CrossShardOptimizer(SGD(0.5))
>>> op = opt.minimize(1.0, {"w": np.ones(2)})
>>> op.optimizer is opt
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TrainOp:
    """What ``optimizer.minimize`` returns: the gradients to apply with that optimizer (None
    under the JAX backend, which takes them from ``jax.grad`` of the loss)."""

    optimizer: "Optimizer"
    loss: object
    gradients: dict | None


class Optimizer:
    """Applies gradients to one replica's variables; ``slots`` is that replica's state."""

    def minimize(self, loss, gradients: dict | None = None) -> TrainOp:
        """``minimize(loss, {name: gradient})`` on the numpy backend; ``minimize(loss)`` under
        ``backend="jax"``, where gradients come from ``jax.grad``."""
        from tpudata.tpu.variables import current_backend

        if current_backend() == "jax":  # the backend refuses hand-made gradients itself
            return TrainOp(self, loss, gradients)
        if gradients is None:
            raise ValueError("minimize() needs {variable name: gradient} for the variables "
                             "used: the numpy backend has no autodiff (backend='jax' has)")
        if not isinstance(gradients, dict) or not gradients:
            raise ValueError("minimize() needs {variable name: gradient} for the variables used")
        return TrainOp(self, float(loss), gradients)

    def apply(self, variables: dict, gradients: dict, slots: dict, step: int) -> None:
        for name, grad in gradients.items():
            if name not in variables:
                raise KeyError(f"gradient for unknown variable {name!r}")
            var = variables[name]
            grad = np.asarray(grad, dtype=var.dtype)
            if grad.shape != var.shape:
                raise ValueError(f"gradient of {name!r} has shape {grad.shape}, variable {var.shape}")
            self._update(name, var, grad, slots, step)

    def _update(self, name, var, grad, slots, step):
        raise NotImplementedError

    def slot_names(self) -> tuple:
        return ()


class SGD(Optimizer):
    def __init__(self, learning_rate: float):
        self.learning_rate = learning_rate

    def _update(self, name, var, grad, slots, step):
        var -= self.learning_rate * grad


class Momentum(Optimizer):
    def __init__(self, learning_rate: float, momentum: float = 0.9, use_nesterov: bool = False):
        self.learning_rate, self.momentum, self.nesterov = learning_rate, momentum, use_nesterov

    def _update(self, name, var, grad, slots, step):
        acc = slots.setdefault(f"{name}/momentum", np.zeros_like(var))
        acc *= self.momentum
        acc += grad
        if self.nesterov:
            var -= self.learning_rate * (grad + self.momentum * acc)
        else:
            var -= self.learning_rate * acc


class Adam(Optimizer):
    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8):
        self.learning_rate, self.beta1, self.beta2, self.epsilon = learning_rate, beta1, beta2, epsilon

    def _update(self, name, var, grad, slots, step):
        m = slots.setdefault(f"{name}/m", np.zeros_like(var))
        v = slots.setdefault(f"{name}/v", np.zeros_like(var))
        t = step + 1
        m *= self.beta1
        m += (1 - self.beta1) * grad
        v *= self.beta2
        v += (1 - self.beta2) * grad * grad
        lr = self.learning_rate * np.sqrt(1 - self.beta2**t) / (1 - self.beta1**t)
        var -= (lr * m / (np.sqrt(v) + self.epsilon)).astype(var.dtype)


class CrossShardOptimizer(Optimizer):
    """Averages (``reduction="mean"``, default) or sums the replicas' gradients, then every
    replica applies the same update with the wrapped optimizer."""

    def __init__(self, optimizer: Optimizer, reduction: str = "mean"):
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', not {reduction!r}")
        if isinstance(optimizer, CrossShardOptimizer):
            raise ValueError("CrossShardOptimizer wraps a plain optimizer")
        self.optimizer = optimizer
        self.reduction = reduction

    def all_reduce(self, per_replica: list[dict]) -> dict:
        names = set(per_replica[0])
        for g in per_replica[1:]:
            if set(g) != names:
                raise ValueError("replicas returned gradients for different variables")
        out = {}
        for name in sorted(names):
            total = np.sum([np.asarray(g[name], dtype=np.float64) for g in per_replica], axis=0)
            out[name] = total / len(per_replica) if self.reduction == "mean" else total
        return out

    def apply(self, variables, gradients, slots, step):
        self.optimizer.apply(variables, gradients, slots, step)
