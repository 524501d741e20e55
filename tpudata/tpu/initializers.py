"""Variable initializers for get_variable: ``initializer(shape, dtype, rng) -> array``."""

from tpudata.tpu.variables import constant, glorot_uniform, ones, random_normal, zeros

__all__ = ["constant", "glorot_uniform", "ones", "random_normal", "zeros"]
