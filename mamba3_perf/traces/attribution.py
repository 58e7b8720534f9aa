"""Kernel name -> (stage_tag, variant): the stage registry first, then a rule table.

1. Exact match on the names the stage registry holds
   (:func:`mamba3_perf.kernels.registry.kernel_tags`): the project's own Triton kernels,
   whose names profilers show unchanged (CUDA: the jit function name; Ascend: the jit
   function name in both Name and Type).
2. :data:`RULES`, first match wins (``re.search``): kernels of other origin — upstream
   TileLang, torch fill/copy/memset kernels and Ascend host-side ops.
3. Anything else is ``other`` with no variant.

Names are data: they are only matched against regular expressions, never evaluated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import pandas as pd

from mamba3_perf.kernels.registry import Tag, kernel_tags


@dataclass(frozen=True)
class Rule:
    pattern: str  # regular expression, matched with re.search
    tag: Tag
    variant: str | None
    why: str


RULES: tuple[Rule, ...] = (
    Rule(r"^mamba_mimo_bwd_bwd_kernel_kernel$", Tag.FUSED, "tilelang", "upstream TileLang bwd_bwd"),
    Rule(r"^mamba_mimo_bwd_fwd_kernel_kernel$", Tag.OTHER, "tilelang", "upstream TileLang bwd_fwd (not part of bwd_bwd)"),
    # torch CUDA kernels that fill, copy or pad tensors around a stage
    Rule(r"vectorized_elementwise_kernel|unrolled_elementwise_kernel|elementwise_kernel_with_index", Tag.HOST, None, "torch elementwise (fill/copy)"),
    Rule(r"FillFunctor|fill_kernel|zero_", Tag.HOST, None, "torch fill"),
    Rule(r"CatArrayBatchedCopy|copy_kernel|direct_copy_kernel", Tag.HOST, None, "torch copy/cat"),
    Rule(r"(?i)memset|memcpy", Tag.HOST, None, "CUDA/NPU memset or memcpy"),
    # Ascend aclnn host-side ops (Name like aclnnInplaceZero_ZerosLikeAiCore_ZerosLike)
    Rule(r"ZerosLike|Fills|ConcatD|\bPad|_Pad|PadV3|TransData|ViewCopy|AsStrided|TensorMove|Cast$", Tag.HOST, None, "Ascend fill/copy/pad op"),
)

_COMPILED = tuple((re.compile(r.pattern), r) for r in RULES)


def classify(name: str, tags: Mapping[str, tuple[Tag, str]]) -> tuple[str, str | None]:
    """(stage_tag, variant) of one kernel name."""
    hit = tags.get(name)
    if hit is not None:
        tag, stage = hit
        return Tag(tag).value, stage
    for rx, rule in _COMPILED:
        if rx.search(name):
            return rule.tag.value, rule.variant
    return Tag.OTHER.value, None


def label(df: pd.DataFrame, tags: Mapping[str, tuple[Tag, str]] | None = None) -> pd.DataFrame:
    """Fill ``stage_tag`` and ``variant`` from ``kernel_name`` (a copy; variants already set are kept)."""
    tags = kernel_tags() if tags is None else tags
    out = df.copy()
    names = out["kernel_name"].astype("string")
    table = {n: classify(n, tags) for n in names.dropna().unique()}
    out["stage_tag"] = [table[n][0] if n in table else Tag.OTHER.value for n in names.fillna("")]
    guessed = pd.Series([table[n][1] if n in table else None for n in names.fillna("")], dtype="string")
    if "variant" in out.columns:
        out["variant"] = out["variant"].astype("string").fillna(guessed)
    else:
        out["variant"] = guessed
    return out
