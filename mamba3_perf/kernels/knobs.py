"""Module-level knobs of the kernels: a rule's override for a sweep (stage25_subchunk.POST_STEPS)
or a variant written but not yet measured (aux_gluon.WIDE_P), named ``MODULE.ATTR`` under
mamba3_perf.kernels.bwd_bwd and set for a sweep (benchmarks/sweep_knob.py) or a compile
(``python -m mamba3_perf.kernels.codegen compile ... --knob``), restored afterwards."""
from __future__ import annotations

import contextlib
import importlib

PACKAGE = "mamba3_perf.kernels.bwd_bwd"


def parse_knobs(specs: list[str]) -> list[tuple[object, str, list[int | None]]]:
    """``MODULE.ATTR=v,...`` strings (values integers or ``none``) -> [(module, attr, values)].
    Raises ValueError naming the bad spec and why."""
    out = []
    for spec in specs:
        name, _, values = spec.partition("=")
        module, _, attr = name.rpartition(".")
        try:
            mod = importlib.import_module(f"{PACKAGE}.{module}")
            vals = [None if v.strip().lower() == "none" else int(v) for v in values.split(",")]
        except (ImportError, ValueError) as e:
            raise ValueError(f"knob {spec!r}: {e}") from None
        if not attr or not hasattr(mod, attr) or not values:
            raise ValueError(f"knob {spec!r}: expected MODULE.ATTR=v,... naming an attribute of {PACKAGE}.MODULE")
        out.append((mod, attr, vals))
    return out


@contextlib.contextmanager
def knobs_set(knobs, values):
    """The knobs (:func:`parse_knobs`) set to ``values`` inside, restored on the way out."""
    saved = [getattr(mod, attr) for mod, attr, _ in knobs]
    try:
        for (mod, attr, _), v in zip(knobs, values):
            setattr(mod, attr, v)
        yield
    finally:
        for (mod, attr, _), v in zip(knobs, saved):
            setattr(mod, attr, v)


def single_knobs(specs: list[str]):
    """A context with the ``MODULE.ATTR=v`` knobs set (one value each: a compile, not a sweep),
    restored on the way out. Raises ValueError for a bad spec or a list of values."""
    knobs = parse_knobs(specs)
    if any(len(vals) != 1 for _, _, vals in knobs):
        raise ValueError("--knob takes one value here (MODULE.ATTR=v)")
    return knobs_set(knobs, [vals[0] for _, _, vals in knobs])
