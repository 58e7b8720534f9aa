"""stage39_auxregs: stage38 with, at P = 64, the Gluon aux (one chunk a program, bf16 parts) on
three programs per SM where two ran: its states' TMA slot as dQ's wgmma operand, a states ring of
one slot and 168 registers a thread.

At P = 64 stage38 runs the Gluon aux on bf16 parts at 192 registers and 79888 B of shared memory
on N128_P64_R4_C16, two programs of one warpgroup per SM by either count: 8 warps to hide the
waits of a kernel that spends most of its time on them (README, "Where stage32's Gluon kernels
stall"). stage38's two shared-memory savings of P = 128 (aux_gluon.STATES_OPERAND: no [NB, P]
copy of the states; aux_gluon.STATES_SLOTS = 1: one states slot fewer) bring it to 75800 B, under
the 76800 B a third program per SM leaves (228 KB an SM, 1 KB of it reserved per program), and
aux_gluon.MAXNREG = 168 (65536 registers over three programs of 128 threads) to three programs by
registers too, for 40 B of spill stores a thread (ptxas, Triton 3.6, sm_90:
``benchmarks/ptxas_stage.py stage39_auxregs 128 64 4 16 --kernel aux``; 16 to 52 B on the other
P = 64 shapes). Without the cap the two savings alone change nothing of the occupancy, and stage38
measured them within 0.4 % (its :data:`stage38_bf16aux.STAGE38_MIN_P`).

Measured on an H100 (NVIDIA H100 80GB HBM3, SM 1980 MHz, torch 2.11.0, Triton 3.6.0; golden in
every setting; ``benchmarks/sweep_knob.py --stage stage38_bf16aux --knob
stage38_bf16aux.STAGE38_MIN_P=128,64 --knob aux_gluon.MAXNREG=none,168``, one process,
records/h100-sweep-auxregs-f742101.json), the aux / the stage in us, stage38 -> the two savings
-> with the cap (this stage):

* N32_P64_R4_C16: 424 / 965 -> 408 / 941 -> 364 / 897
* N64_P64_R4_C16: 564 / 1360 -> 553 / 1351 -> 509 / 1303
* N128_P64_R4_C16: 921 / 2292 -> 902 / 2271 -> 856 / 2224
* N128_P64_R8_C8: 1838 / 4826 -> 1804 / 4772 -> 1728 / 4719
* N128_P64_R2_C32: 482 / 1194 -> 475 / 1188 -> 455 / 1168
* N128_P64_R1_C64: 268 / 656 -> 273 / (host noise) -> 267 / 652

The cap alone (two programs per SM, the spills without the third program) is within 1 % of
stage38. state_terms the same way (terms_gluon.MAXNREG = 128 or 136 for a fourth program per SM,
records/h100-sweep-termsregs-f742101.json) measured 3-7 % slower on five of six shapes, as at
stage32: not taken.

Side by side with stage38 on the official grid, one process per case, three rounds (same H100
kind; ``bash benchmarks/h200_ladder.sh /tmp/run 290 532 official
stage38_bf16aux,stage39_auxregs,tilelang 3 16 stage``, TileLang's compiles cut off by the phase;
records/h100-auxregs-vs-bf16aux-16eb925.json): golden 132/132, stage39 / stage38 1.018x in
geomean, 1.022-1.066x on the five shapes above that gain, within 0.7 % elsewhere.

Only at P = 64 where a chunk fills the aux's 64 rows (:func:`changes`); at P = 32 the aux runs
three programs per SM already (162 registers, 68.6 KB), at P = 128 stage38's rule holds, and where
C*R = 32 the Triton aux runs. Elsewhere, and wherever the Gluon aux does not take bf16 parts (no
Hopper GPU, fp32 or fp16 cached states: the cap would spill the TF32 parts' 254 registers), this
stage is stage38.
"""
from __future__ import annotations

import torch

from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux, stage34_poststeps, stage37_bf16split, stage38_bf16aux
from mamba3_perf.kernels.bwd_bwd.common import WG_ROWS
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage39_auxregs.AUX_REGS=0,1): 0 runs stage38
AUX_REGS: bool = True

# the aux's registers a thread where this stage changes stage38: three programs of 128 threads in
# an SM's 65536
AUX_MAXNREG: int = 168

# the P at which it does: the aux's shared memory at P = 64 with the states operand and one slot
# (75800 B) fits three programs per SM
AUX_REGS_P: int = 64


def aux_bf16_parts(x: dict) -> bool:
    """Whether the Gluon aux takes bf16 parts for ``x`` (its knob aux_gluon.BF16, bf16 cached
    states, the bf16 split: stage37_bf16split.splits_bf16), where a cap of :data:`AUX_MAXNREG`
    spills tens of bytes, not the TF32 parts' hundreds."""
    return (getattr(stage24_gluonaux.aux_gluon, "BF16", False)
            and x["states"].dtype == torch.bfloat16 and stage37_bf16split.splits_bf16(x))


def changes(x: dict, meta) -> bool:
    """Whether this stage launches anything other than stage38's kernels for ``x`` and ``meta``:
    P = :data:`AUX_REGS_P`, one chunk of C*R = 64 rows a Gluon aux program, its bf16 parts
    (:func:`aux_bf16_parts`)."""
    return AUX_REGS and meta.P == AUX_REGS_P and meta.C * meta.R == WG_ROWS and aux_bf16_parts(x)


def keywords(x: dict, meta) -> dict:
    """This stage's stage38_bf16aux.run_with keywords for ``x`` and ``meta``: where :func:`changes`,
    the Gluon aux with the states operand, one states slot and :data:`AUX_MAXNREG` registers a
    thread; none elsewhere (stage38). The stages past this one lay theirs over these."""
    return dict(states_operand=True, states_slots=1, aux_maxnreg=AUX_MAXNREG) if changes(x, meta) else {}


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage39_auxregs",
    parent="stage38_bf16aux",
    summary="stage38 with, at P = 64, the Gluon aux on its states' TMA slot as dQ's operand, one "
            "states slot and 168 registers a thread: three aux programs per SM where two ran",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
