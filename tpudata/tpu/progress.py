"""The executor's progress lines, shown by default as TPUEstimator's are.

TPUEstimator logs its loss and ``global_step/sec`` through ``tf.logging`` at INFO, which
TensorFlow shows without any set-up. Python's logging hides INFO until a program configures it,
so a training run would be silent. :func:`log` keeps library manners (nothing is printed, no
handler is added to any logger, the program's configuration is never changed) and still shows
the lines by default:

- when the program has configured logging that the record would reach (a handler on the logger or
  on an ancestor it propagates to, e.g. ``logging.basicConfig``), the record is logged normally:
  the program's levels and handlers decide (``basicConfig(level=logging.WARNING)`` hides it);
- when it has configured none, the record goes to stderr through a handler of this module (as
  Python's ``logging.lastResort`` does for warnings), at INFO and above unless a level was set on
  the logger or an ancestor (``logging.getLogger("tpudata").setLevel(logging.WARNING)`` hides it);
- ``TPUEstimator(verbose=False)`` logs the lines at DEBUG instead.
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(levelname)s:%(name)s:%(message)s"  # logging.BASIC_FORMAT, as tf.logging's "INFO:tensorflow:"


class _StderrHandler(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment (a redirected or captured stderr too)."""

    def __init__(self):
        logging.Handler.__init__(self)
        self.setFormatter(logging.Formatter(FORMAT))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.setStream; the stream is always sys.stderr
        pass


DEFAULT_HANDLER = _StderrHandler()


def configured(logger: logging.Logger) -> bool:
    """Whether a record of ``logger`` reaches a handler the program installed."""
    return logger.hasHandlers()


def _threshold(logger: logging.Logger) -> int:
    """The level from which records show when logging is not configured: the first level set
    on the logger or an ancestor below the root, the root's if it is not its default WARNING,
    else INFO."""
    current = logger
    while current is not None and current.parent is not None:
        if current.level != logging.NOTSET:
            return current.level
        current = current.parent
    root = logging.getLogger()
    return root.level if root.level not in (logging.NOTSET, logging.WARNING) else logging.INFO


def log(logger: logging.Logger, verbose: bool, msg: str, *args, level: int = logging.INFO,
        stacklevel: int = 2) -> None:
    """Log a progress line of ``logger``: shown by default, hidden by ``verbose=False`` or by the
    program's logging configuration (see the module doc). ``stacklevel`` as in ``Logger.log``
    (2: the caller of this function)."""
    if not verbose:
        logger.debug(msg, *args, stacklevel=stacklevel)
        return
    if configured(logger):
        logger.log(level, msg, *args, stacklevel=stacklevel)
        return
    if logger.disabled or logger.manager.disable >= level or level < _threshold(logger):
        return
    fn, lno, func, _ = logger.findCaller(stacklevel=stacklevel)
    record = logger.makeRecord(logger.name, level, fn, lno, msg, args, None, func)
    if logger.filter(record):
        DEFAULT_HANDLER.handle(record)
