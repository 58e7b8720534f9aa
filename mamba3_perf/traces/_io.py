"""Shared reading helpers for the trace parsers: streaming JSON, progress, exact times.

Streaming: :func:`iter_json_items` walks a (possibly gzipped) JSON file with ijson's C
backend and yields one event dict at a time, so memory stays bounded by the rows a parser
keeps, not by the file size. A file that breaks off (truncated or corrupt) after at least one
item yields what came before and then ``warnings.warn``; one that breaks before any item
raises :class:`ParseError`.
"""
from __future__ import annotations

import gzip
import os
import re
import warnings
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Callable, Iterator

from mamba3_perf.errors import ParseError, first_line

Progress = Callable[[int, int], None]  # progress(bytes_read, total_bytes)

NA_CELLS = frozenset({"", "N/A", "NA", "n/a", "nan", "NaN", "-"})


class _CountingReader:
    """A binary file wrapper that reports how far it has read through ``progress``."""

    def __init__(self, raw, total: int, progress: Progress | None):
        self._raw = raw
        self._total = total
        self._progress = progress

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        if self._progress is not None:
            self._progress(self._raw.tell(), self._total)
        return data


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_binary(path: Path, progress: Progress | None = None):
    """Open ``path`` for reading bytes, un-gzipping when needed; progress counts file bytes."""
    total = os.path.getsize(path)
    if total == 0:
        raise ParseError(f"{path}: empty file")
    raw = open(path, "rb")
    reader = _CountingReader(raw, total, progress)
    if is_gzip(path):
        return gzip.GzipFile(fileobj=reader, mode="rb"), raw
    return reader, raw


def head_text(path: Path, n: int = 65536) -> str:
    """The first ``n`` bytes of the (un-gzipped) file as text, for sniffing."""
    opener = gzip.open if is_gzip(path) else open
    try:
        with opener(path, "rb") as f:
            return f.read(n).decode("utf-8", errors="replace")
    except (OSError, EOFError) as e:
        raise ParseError(f"{path}: cannot read: {e}") from None


def tail_text(path: Path, n: int = 65536) -> str:
    """The last ``n`` bytes of a plain file (gzipped files: the whole stream is not re-read)."""
    if is_gzip(path):
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - n))
        return f.read().decode("utf-8", errors="replace")


def top_level_number(path: Path, key: str) -> int | None:
    """An integer top-level field (e.g. Kineto ``baseTimeNanoseconds``) found near either end.

    Kineto writes its metadata before ``traceEvents``; the tail is checked for writers that
    put it after. Reading only the ends keeps this O(1) on a 1 GiB file.
    """
    pat = re.compile(r'"%s"\s*:\s*(-?\d+)' % re.escape(key))
    for text in (head_text(path), tail_text(path)):
        m = pat.search(text)
        if m:
            return int(m.group(1))
    return None


def iter_json_items(path: Path, prefix: str, progress: Progress | None = None) -> Iterator[dict]:
    """Yield the items under ``prefix`` (``"item"`` for a top-level array, ``"traceEvents.item"``).

    Numbers with a fraction come back as ``Decimal`` (exact); see the module doc for the
    policy on truncated files. ijson is imported here, not with the package: the benchmark
    scripts reach this module through the analysis imports and run on machines (the lent GPU
    image) that have the rest of the dependencies but not ijson.
    """
    import ijson

    f, raw = open_binary(path, progress)
    n = 0
    try:
        try:
            for item in ijson.items(f, prefix):
                n += 1
                yield item
        except (ijson.JSONError, EOFError, OSError, gzip.BadGzipFile) as e:
            where = raw.tell()
            if n == 0:
                raise ParseError(f"{path}: not a readable JSON trace ({first_line(e)})") from None
            warnings.warn(
                f"{path}: JSON breaks off near byte {where} ({first_line(e)}); kept the {n} events read before it",
                stacklevel=3,
            )
    finally:
        raw.close()
    if n == 0:
        raise ParseError(f"{path}: no events under {prefix!r}")


def exact_ns(value, *, origin: str, field: str) -> int:
    """A µs timestamp (number or string, maybe with a trailing tab) as exact integer ns."""
    if isinstance(value, str):
        value = value.strip()
    try:
        d = Decimal(value) if not isinstance(value, float) else Decimal(repr(value))
    except (InvalidOperation, TypeError, ValueError):
        raise ParseError(f"{origin}: {field} is not a time in µs: {value!r}") from None
    if not d.is_finite():
        raise ParseError(f"{origin}: {field} is not a finite time: {value!r}")
    return int((d * 1000).to_integral_value())


def number_or_na(value) -> float:
    """A CSV cell as float; N/A-style cells become NaN, thousands separators are dropped."""
    if value is None:
        return float("nan")
    s = str(value).strip()
    if s in NA_CELLS:
        return float("nan")
    return float(s.replace(",", ""))


def relative_us(start_ns: list[int]) -> list[float]:
    """Exact ns starts as float µs relative to the earliest one."""
    if not start_ns:
        return []
    t0 = min(start_ns)
    return [(t - t0) / 1000.0 for t in start_ns]


def serialized_starts(dur_us: list[float]) -> list[float]:
    """Start times for untimed sources: launches laid end to end in the given order."""
    out, t = [], 0.0
    for d in dur_us:
        out.append(t)
        t += d
    return out
