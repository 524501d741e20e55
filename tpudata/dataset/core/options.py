"""Options / with_options: pipeline-wide settings, as ``tf.data.Options``.

Only the knobs tpudata honours exist (setting any other attribute raises AttributeError):

- ``deterministic``: the default of ``map`` and ``interleave`` where their own
  ``deterministic`` argument is None (False: results as they complete).
- ``autotune.cpu_budget``: how many threads ``num_parallel_calls=AUTOTUNE`` means
  (default: the number of cores).
- ``threading.private_threadpool_size``: the most threads any one ``map`` / ``interleave`` uses.
- ``experimental_optimization.map_and_batch_fusion``: False turns off the fusion of
  ``map(fn).batch(n)`` where ``fn`` calls a tpudata.image preset (default on; see
  :mod:`tpudata.dataset.core.optimize`); ``.parse_before_shuffle``: False runs
  ``shuffle(n).parse(spec)`` as written (default: the parse runs first, so the shuffle buffer
  holds parsed values).

>>> from tpudata.dataset import Dataset, Options
>>> options = Options()
>>> options.deterministic = False
>>> options.autotune.cpu_budget = 2
>>> ds = Dataset.range(4).map(lambda x: x + 1, num_parallel_calls=-1).with_options(options)
>>> ds.options().autotune.cpu_budget, sorted(int(x) for x in ds)
(2, [1, 2, 3, 4])

Options set anywhere in a pipeline apply to all of it; when several ``with_options`` set the
same knob, the outermost (last applied) wins.
"""

from __future__ import annotations

import os

from tpudata.dataset.core.common import _Unary, input_spec

#: ``num_parallel_calls=AUTOTUNE`` / ``num_parallel_reads=AUTOTUNE`` (``tf.data.AUTOTUNE``): one
#: worker per core, or ``Options.autotune.cpu_budget`` where the op honours options. The one
#: definition (``tpudata.AUTOTUNE`` and ``tpudata.dataset.AUTOTUNE`` are this value).
AUTOTUNE = -1


def worker_count(n, name: str = "num_parallel_calls", default: int = 0) -> int:
    """How many workers ``num_parallel_calls`` (or the argument ``name``) asks for: None or 0
    give ``default`` (0: none, the work runs in the caller's thread; AUTOTUNE: one per core),
    AUTOTUNE one per core, N >= 1 N; anything else raises ValueError. Every op turns its
    parallelism argument into workers here.

    >>> worker_count(None), worker_count(3), worker_count(AUTOTUNE) == (os.cpu_count() or 2)
    (0, 3, True)
    """
    if n is None or int(n) == 0:
        return worker_count(default, name) if default else 0
    n = int(n)
    if n == AUTOTUNE:
        return os.cpu_count() or 2
    if n < 1:
        raise ValueError(f"{name} must be >= 1, None or AUTOTUNE (-1), not {n}")
    return n


def is_autotune(n) -> bool:
    """Whether ``num_parallel_calls`` is AUTOTUNE (then ``Options.autotune.cpu_budget`` applies)."""
    return n is not None and int(n) == AUTOTUNE


class _Group:
    __slots__: tuple = ()

    def __init__(self):
        for name in self.__slots__:
            object.__setattr__(self, name, None)

    def __setattr__(self, name, value):
        if name not in self.__slots__:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}; tpudata "
                                 f"honours {', '.join(self.__slots__)}")
        if value is not None and (isinstance(value, bool) or int(value) < 1):
            raise ValueError(f"{type(self).__name__}.{name} must be a positive integer or None")
        object.__setattr__(self, name, None if value is None else int(value))

    def _merge(self, other) -> None:
        for name in self.__slots__:
            if getattr(other, name) is not None:
                setattr(self, name, getattr(other, name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


class AutotuneOptions(_Group):
    __slots__ = ("cpu_budget",)


class ThreadingOptions(_Group):
    __slots__ = ("private_threadpool_size",)


class OptimizationOptions(_Group):
    """``tf.data.experimental.OptimizationOptions``: the graph rewrites, each on unless set False."""

    __slots__ = ("map_and_batch_fusion", "parse_before_shuffle")

    def __setattr__(self, name, value):
        if name not in self.__slots__:
            raise AttributeError(f"OptimizationOptions has no option {name!r}; tpudata honours "
                                 f"{', '.join(self.__slots__)}")
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"OptimizationOptions.{name} must be True, False or None, not {value!r}")
        object.__setattr__(self, name, value)


class Options:
    """Pipeline options (``tf.data.Options``); see the module docstring for what each does."""

    __slots__ = ("deterministic", "autotune", "threading", "experimental_optimization")

    def __init__(self):
        object.__setattr__(self, "deterministic", None)
        object.__setattr__(self, "autotune", AutotuneOptions())
        object.__setattr__(self, "threading", ThreadingOptions())
        object.__setattr__(self, "experimental_optimization", OptimizationOptions())

    def __setattr__(self, name, value):
        if name != "deterministic":
            raise AttributeError(f"Options has no settable option {name!r}; tpudata honours "
                                 "deterministic, autotune.cpu_budget, "
                                 "threading.private_threadpool_size and "
                                 "experimental_optimization.<rewrite> (map_and_batch_fusion, "
                                 "parse_before_shuffle)")
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"Options.deterministic must be True, False or None, not {value!r}")
        object.__setattr__(self, name, value)

    def merge(self, other: "Options") -> "Options":
        """A new Options: these, with every knob ``other`` sets overriding."""
        out = Options()
        for src in (self, other):
            if src.deterministic is not None:
                out.deterministic = src.deterministic
            out.autotune._merge(src.autotune)
            out.threading._merge(src.threading)
            out.experimental_optimization._merge(src.experimental_optimization)
        return out

    def optimization_enabled(self, name: str) -> bool:
        """Whether the graph rewrite ``name`` may run (on unless set False)."""
        return getattr(self.experimental_optimization, name, None) is not False

    def threads(self, requested: int, autotune: bool) -> int:
        """The thread count for an op that asked for ``requested`` (AUTOTUNE when ``autotune``)."""
        if autotune and self.autotune.cpu_budget is not None:
            requested = self.autotune.cpu_budget
        cap = self.threading.private_threadpool_size
        return min(requested, cap) if cap is not None and requested else requested

    def __eq__(self, other) -> bool:
        return isinstance(other, Options) and repr(self) == repr(other)

    def __repr__(self) -> str:
        return (f"Options(deterministic={self.deterministic!r}, autotune={self.autotune!r}, "
                f"threading={self.threading!r}, "
                f"experimental_optimization={self.experimental_optimization!r})")


DEFAULT = Options()


class OptionsDataset(_Unary):
    def __init__(self, input_ds, options: Options):
        super().__init__(input_ds)
        if not isinstance(options, Options):
            raise TypeError(f"with_options() needs an Options, not {type(options).__name__}")
        self.opts = options

    def _make_iterator(self, ctx):
        return self.input._make_iterator(ctx)

    def _spec(self):
        return input_spec(self.input)

    def cardinality(self):
        return self.input.cardinality()


def options_of(ds) -> Options:
    """The merged options of ``ds`` and every dataset it reads (outermost wins)."""
    from tpudata.dataset.core.graph import walk

    found = [d.opts for d in walk(ds) if isinstance(d, OptionsDataset)]
    out = Options()
    for opts in reversed(found):  # innermost first, so outer ones override
        out = out.merge(opts)
    return out


__all__ = ["AUTOTUNE", "AutotuneOptions", "OptimizationOptions", "Options", "OptionsDataset", "ThreadingOptions",
           "is_autotune", "options_of", "worker_count"]
