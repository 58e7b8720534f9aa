"""Named cases: one definition of every shape, loaded from ``mamba3_perf/data/cases.yaml``."""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace
from importlib import resources

import torch
import yaml

from mamba3_perf.errors import CaseError

DTYPES = {
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[str(name).lower()]
    except KeyError:
        raise CaseError(f"unknown dtype {name!r}; expected one of fp16, bf16, fp32") from None


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Case:
    """One problem shape. ``id`` names it in tables and records."""

    id: str
    B: int
    S: int
    H: int
    G: int
    N: int
    P: int
    R: int
    C: int
    dtype: str = "float16"
    reduce_o: bool = True
    has_d: bool = True
    rotary_dim_divisor: int = 4

    def __post_init__(self):
        for f in ("B", "S", "H", "G", "N", "P", "R", "C"):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0:
                raise CaseError(f"case {self.id!r}: {f} must be a positive integer, got {v!r}")
        if self.H % self.G:
            raise CaseError(f"case {self.id!r}: H % G must be 0, got H={self.H}, G={self.G}")
        parse_dtype(self.dtype)

    @property
    def torch_dtype(self) -> torch.dtype:
        return parse_dtype(self.dtype)

    @property
    def nchunks(self) -> int:
        return math.ceil(self.S / self.C)

    @property
    def rd(self) -> int:
        return self.N // self.rotary_dim_divisor

    @property
    def shape_label(self) -> str:
        return f"B{self.B} S{self.S} H{self.H} G{self.G} N{self.N} P{self.P} R{self.R} C{self.C} {self.dtype}"

    def with_(self, **kw) -> "Case":
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=1)
def _load() -> dict[str, list[Case]]:
    text = resources.files("mamba3_perf.data").joinpath("cases.yaml").read_text()
    raw = yaml.safe_load(text)
    defaults = raw.get("defaults", {})
    sets: dict[str, list[Case]] = {}
    for set_name, rows in raw["sets"].items():
        sets[set_name] = [Case(**{**defaults, **row}) for row in rows]
    return sets


def case_sets() -> dict[str, list[Case]]:
    return dict(_load())


def cases(set_name: str) -> list[Case]:
    sets = _load()
    if set_name == "all":
        return [c for rows in sets.values() for c in rows]
    try:
        return list(sets[set_name])
    except KeyError:
        raise CaseError(f"unknown case set {set_name!r}; known: {', '.join(sets)}, all") from None


def get_case(case_id: str) -> Case:
    for rows in _load().values():
        for c in rows:
            if c.id == case_id:
                return c
    known = [c.id for rows in _load().values() for c in rows]
    raise CaseError(f"unknown case {case_id!r}; known cases: {', '.join(known)}")


def case_from_shape(shape: str, *, N: int = 64, P: int = 64, R: int = 4, C: int = 16,
                    dtype: str = "float16", reduce_o: bool = True, has_d: bool = True) -> Case:
    """Build a case from ``--shape B,S,H,G`` plus the per-dimension options."""
    try:
        B, S, H, G = (int(x) for x in shape.split(","))
    except ValueError:
        raise CaseError(f"--shape must be B,S,H,G (four integers), got {shape!r}") from None
    dt = dtype_name(parse_dtype(dtype))
    cid = f"B{B}_S{S}_H{H}_G{G}_N{N}_P{P}_R{R}_C{C}_{dt}"
    return Case(id=cid, B=B, S=S, H=H, G=G, N=N, P=P, R=R, C=C, dtype=dt,
                reduce_o=reduce_o, has_d=has_d)
