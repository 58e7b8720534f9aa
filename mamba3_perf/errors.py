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


def first_line(e: BaseException) -> str:
    """An exception as one line, "Type: first line of its message" (the type alone where the
    message is empty): ijson's C backend, Triton and CUDA add context on the lines after."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0].strip()}" if text else type(e).__name__
