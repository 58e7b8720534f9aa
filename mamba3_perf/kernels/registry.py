"""Stage registry: each optimization step of the bwd_bwd ladder is a named stage.

A stage lists its kernel launches, each with a :class:`Tag` saying which part of the
algorithm it is (pre / aux / scan / post, or fused when one launch does everything), so a
profiler trace can be attributed back to the ladder by kernel name.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from mamba3_perf.errors import StageError


class Tag(str, enum.Enum):
    PRE = "pre"
    AUX = "aux"
    SCAN = "scan"
    POST = "post"
    FUSED = "fused"
    HOST = "host"  # host-side torch ops of a stage (padding, allocation, reductions)
    OTHER = "other"


@dataclass(frozen=True)
class KernelSpec:
    """One kernel a stage may launch. ``name`` is the jit function name as profilers show it."""

    name: str
    tag: Tag
    summary: str = ""


@dataclass(frozen=True)
class StageSpec:
    """A named step of the ladder.

    ``entry(inputs: dict, out: dict, meta) -> None`` runs the stage on padded, validated
    inputs and fills the preallocated outputs; ``parent`` is the step it builds on.
    """

    name: str
    parent: str | None
    summary: str
    entry: Callable = field(compare=False, repr=False)
    kernels: tuple[KernelSpec, ...] = ()
    zero_outputs: bool = True  # False once every output is known to be fully written
    # its own kernels (Gluon) run on Hopper GPUs only: elsewhere it launches its parent's
    hopper_only: bool = False

    def tag_of(self, kernel_name: str) -> Tag | None:
        for k in self.kernels:
            if k.name == kernel_name:
                return k.tag
        return None


_STAGES: dict[str, StageSpec] = {}


def register_stage(spec: StageSpec) -> StageSpec:
    if spec.name in _STAGES and _STAGES[spec.name] is not spec:
        raise StageError(f"stage {spec.name!r} is registered twice")
    _STAGES[spec.name] = spec
    return spec


def _ensure_loaded() -> None:
    # Importing the stage package registers every stage module.
    import mamba3_perf.kernels.bwd_bwd  # noqa: F401


def get_stage(name: str) -> StageSpec:
    _ensure_loaded()
    try:
        return _STAGES[name]
    except KeyError:
        raise StageError(
            f"unknown stage {name!r}; registered stages: {', '.join(_STAGES)}"
        ) from None


def list_stages() -> list[StageSpec]:
    """All registered stages in ladder order (parents before children)."""
    _ensure_loaded()
    return list(_STAGES.values())


def kernel_tags() -> dict[str, tuple[Tag, str]]:
    """Map of kernel name -> (tag, stage name) over every registered stage.

    A kernel shared by several stages maps to the first (lowest) stage that lists it.
    """
    out: dict[str, tuple[Tag, str]] = {}
    for st in list_stages():
        for k in st.kernels:
            out.setdefault(k.name, (k.tag, st.name))
    return out
