"""One exception family for mamba3-perf.

Errors caused by bad input subclass ``ValueError`` so callers can catch them the usual way;
the CLI maps every ``Mamba3PerfError`` to one message line and exit code 2.
"""


class Mamba3PerfError(Exception):
    """Base class of every error this package raises on purpose."""


class ShapeError(Mamba3PerfError, ValueError):
    """A tensor argument has the wrong rank, shape, dtype, device or layout."""


class StageError(Mamba3PerfError, ValueError):
    """An unknown stage name, or a stage that cannot run the requested case."""


class CaseError(Mamba3PerfError, ValueError):
    """An unknown case id or a malformed case definition."""


class ParseError(Mamba3PerfError, ValueError):
    """A profiler file that is empty, truncated, corrupt or of an unknown layout."""


class RunStoreError(Mamba3PerfError, ValueError):
    """A run directory that is missing, incomplete or of another format version."""


class BackendError(Mamba3PerfError, RuntimeError):
    """A requested backend (npu, cuda) or tool is not available on this machine."""
