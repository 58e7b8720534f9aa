"""stage33_statewalk: stage32 with the scan and state_terms as one walk over the chunks (Hopper).

Where the Gluon aux stores each chunk's increment of the dstates recurrence (DST) and a chunk has
C*R = 64 fused rows, stage32 runs the scan (in place over DST: the dstates each chunk sees) and
then state_terms, which reads those dstates back: DST's [N, P] fp32 rows cross HBM three times
between them. Here walk_gluon's kernel does both: one program per (b, h, group of N rows) walks
the chunks in reverse with its rows of dstates on chip, and at each chunk runs state_terms'
products on them. What state_terms sums over N (dPsiV's dstates term, DDA_CS_REV, DFACTOR, DDA)
is stored per group, and :func:`launch_walk_finish`'s kernel adds the groups' parts and the
aux's chunk-local dPsiV into DV, each chunk's DMIMO_V part, DDA_CS_REV, DFACTOR and DDA, in a
fixed order. Elsewhere (other shapes, the interpreter, Ascend, GPUs other than Hopper) this stage
is stage32.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux, stage25_subchunk, stage32_banks
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH, blocks, chunk_frame, load_rows, value_grads
from mamba3_perf.kernels.bwd_bwd.common import is_hopper
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

try:  # Gluon is Triton's; a Triton without it (or without its Hopper module) keeps stage32
    from mamba3_perf.kernels.bwd_bwd import walk_gluon
except ImportError:  # pragma: no cover - depends on the installed Triton
    walk_gluon = None


@triton.jit
def bwd_bwd_walk_finish_kernel(
    DPSIV_S, V, MV,  # the aux's chunk-local dPsiV [B*H*nc, C*R, P]; v [B,S,H,P]; mimo_v [H,R,P]
    DVP, DMVW, DREVP, DFACP, DDAP,  # the walk's group parts [NG, B*H*nc, ...] (walk_gluon.PART_NAMES)
    DV, DMVP_S, DDA, DDACSREV, DFAC,  # DV [B,S,H,P]; each chunk's DMIMO_V part [B*H*nc, R, P]; [B,H,S]
    S, H, P, BHNC,
    C: tl.constexpr, R: tl.constexpr, BP: tl.constexpr, NG: tl.constexpr,
):
    """One chunk's value side and N sums: DV rows and the chunk's DMIMO_V part from the aux's
    dPsiV plus the groups' parts of the dstates term, and DDA_CS_REV, DFACTOR, DDA as the sums of
    the groups' parts (group 0 first)."""
    b, h, c, bh, bhc, i, _ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    p = tl.arange(0, BP)
    mp = p < P
    v = tl.load(V + ((b * S + tpos[:, None]) * H + h) * P + p[None, :], mask=mp[None, :], other=0.0).to(tl.float32)
    psi = tl.load(MV + (h * R + ri[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
    dv, dmv = value_grads(load_rows(DPSIV_S, bhc, i, p, P, CR), psi, v, C, R, BP)
    r_ = tl.arange(0, R)
    drev = tl.zeros([C], dtype=tl.float32)
    dfac = tl.zeros([C], dtype=tl.float32)
    dda = 0.0
    for g in tl.static_range(NG):
        part = g * BHNC + bhc
        dv += tl.load(DVP + (part * C + tc[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
        dmv += tl.load(DMVW + (part * R + r_[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
        drev += tl.load(DREVP + part * C + tc)
        dfac += tl.load(DFACP + part * C + tc)
        dda += tl.load(DDAP + part)
    tl.store(DV + ((b * S + c * C + tc[:, None]) * H + h) * P + p[None, :], dv.to(DV.dtype.element_ty),
             mask=mp[None, :])
    tl.store(DMVP_S + (bhc * R + r_[:, None]) * P + p[None, :], dmv, mask=mp[None, :])
    tl.store(DDACSREV + bh * S + c * C + tc, drev)
    tl.store(DFAC + bh * S + c * C + tc, dfac)
    tl.store(DDA + bh * S + c * C + tc, tl.zeros([C], dtype=tl.float32) + dda)


def launch_walk_finish(x: dict, s: dict, out: dict, meta, parts: dict) -> None:
    """The finish kernel on a (B*H*nc) grid over the walk's ``parts`` (walk_gluon.alloc_parts)."""
    ng = parts["DDAP"].shape[0]
    launching.launch(bwd_bwd_walk_finish_kernel, (meta.B * meta.H * meta.nchunks,))(
        s["DPSIV"], x["v"], x["mimo_v"],
        parts["DVP"], parts["DMVW"], parts["DREVP"], parts["DFACP"], parts["DDAP"],
        out["DV"], s["DMVP"], out["DDA"], out["DDA_CS_REV"], out["DFACTOR"],
        meta.S, meta.H, meta.P, meta.B * meta.H * meta.nchunks,
        C=meta.C, R=meta.R, BP=blocks(meta)["BP"], NG=ng, **CHUNK_LAUNCH,
    )


def launch_walk_terms(x: dict, s: dict, out: dict, meta, **_ignored) -> None:
    """stage6_statepass.launch_state_terms' signature (its keywords do not apply): the walk over
    DST's increments, then the finish kernel."""
    parts = walk_gluon.alloc_parts(meta, walk_gluon.groups(meta), x["q"].device)
    walk_gluon.launch_state_walk(x, s, meta, parts)
    launch_walk_finish(x, s, out, meta, parts)


def skip_scan(x: dict, s: dict, meta, **_ignored) -> None:
    """No scan: the walk reads DST's increments as the aux stored them."""


def walks(x: dict, meta, kw: dict) -> bool:
    """Whether this stage runs the walk for ``x`` and ``meta``, given stage32's keywords ``kw``:
    on a Hopper GPU, where the Gluon aux runs (so it stores the increments and the state pass is
    the scan alone) and the walk is written for the shape (walk_gluon.supported: C*R = 64, so
    state_terms runs one chunk a program there)."""
    return (walk_gluon is not None and is_hopper(x["q"].device) and walk_gluon.supported(meta)
            and stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=kw.get("wide_p"), chunk_pairs=kw.get("aux_pairs")))


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage32's, and where :func:`walks`, the walk as
    state_terms' launcher and no scan."""
    kw = stage32_banks.plan(x, meta)
    if walks(x, meta, kw):
        kw.update(state_terms=launch_walk_terms, scan=skip_scan)
    return kw


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage33_statewalk",
    parent="stage32_banks",
    summary="stage32 with the scan and state_terms as one Gluon walk over the chunks per (b, h, N "
            "group), dstates on chip; a finish kernel adds the groups' N sums (Hopper, C*R = 64)",
    entry=run,
    kernels=stage32_banks.STAGE.kernels
    + (KernelSpec("bwd_bwd_state_walk_gluon_kernel", Tag.SCAN,
                  "reverse scan with state_terms' products per chunk, dstates on chip, Gluon"),
       KernelSpec("bwd_bwd_walk_finish_kernel", Tag.POST, "the walk's group sums, DV and DMIMO_V parts")),
    zero_outputs=False,
    hopper_only=True,
))
