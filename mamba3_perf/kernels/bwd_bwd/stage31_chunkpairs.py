"""stage31_chunkpairs: stage30 with both Gluon kernels on two chunks per program where a chunk has
C*R = 32 fused rows (gluon_common.chunks_per_program).

The products of the Gluon kernels run on 64 rows, a warpgroup's least. Where a chunk has 32
(N256_P64_R4_C8, N128_P128_R4_C8, N16_P64_R4_C8), stage30's state_terms runs one chunk on them:
half of its k, ks, dK and PsiV tiles and of its k / dK TMA boxes belong to the next chunk and are
computed and dropped, and it was the largest kernel there (on an H100 at fc0c573, stage26 on
N128_P128_R4_C8: state_terms 2401 us of 6611, records/h100-sweep-wgcols-stage26-fc0c573.json;
N256_P64_R4_C8: 1920 of 6477, records/h100-sweep-wavebnb-d57951a.json). The Gluon aux, on one
chunk of 32 rows, measured slower than the Triton aux with its wave pass there
(aux_gluon.supported), so stage30 runs those.

Here two chunks adjacent in time fill the 64 rows of both Gluon kernels: every row-indexed load
and store is that of one chunk of 2C steps (the chunks' rows are adjacent in every buffer), and
what is per chunk is taken per chunk (terms_gluon's and aux_gluon's CP): the dstates and states
blocks (two of each a step in the TMA rings), dK_raw and the cached-state term of dQ (each
against each chunk's block, each chunk's rows kept), ks dstates (each chunk's ks rows against its
own dstates), the increments (each chunk's 32 K rows), the scores' blocks across the chunks
masked out, DDA, DSSDA's blocks, DMIMO_V's part and the D term's sum. Half the programs and steps;
where the aux runs in Gluon, the state pass is the scan alone (it forms the increments), and at P
= 128 every reader takes the inputs (stage26's rule for that aux).

Elsewhere (C*R = 64, an odd number of chunks, the Triton kernels' devices) this stage is stage30;
at N = 16 (no whole 32-column block of the aux's first walk) only state_terms runs in pairs.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux, stage25_subchunk, stage30_stepdesc
from mamba3_perf.kernels.registry import StageSpec, register_stage


# knob: the Gluon aux in pairs where it takes C*R = 32 only in pairs (else the Triton aux and its
# wave pass stay there), at P of at least this. Measured on an H100 through stage30's knobs
# (benchmarks/sweep_knob.py --stage stage30_stepdesc --knob terms_gluon.CHUNK_PAIRS=0,1 --knob
# aux_gluon.CHUNK_PAIRS=0,1, golden in every combination; state_terms in pairs in both): faster
# on N128_P128_R4_C8 (6387 -> 6320 us), slower on N256_P64_R4_C8 (6201 -> 6383 us: the Gluon
# aux 2170 us against the Triton aux's 1948 and its wave pass)
AUX_PAIRS_MIN_P: int = 128


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage30's, state_terms' ``chunk_pairs``, and where
    the Gluon aux takes C*R = 32 only in pairs and P >= :data:`AUX_PAIRS_MIN_P`, ``aux_pairs``
    with stage26's rule for that aux at P = 128 (every reader on the inputs)."""
    kw = dict(stage30_stepdesc.plan(x, meta), chunk_pairs=True)
    if (meta.P >= AUX_PAIRS_MIN_P and stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True, chunk_pairs=True)
            and not stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True, chunk_pairs=False)):
        kw["aux_pairs"] = True
        if meta.P > 64:
            kw["inputs"] = True
            kw.pop("qk_inputs", None)
    return kw


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage31_chunkpairs",
    parent="stage30_stepdesc",
    summary="stage30 with both Gluon kernels on two chunks per program where a chunk has C*R = 32 "
            "fused rows (the 64 rows of their products filled, not half dropped)",
    entry=run,
    kernels=stage30_stepdesc.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
