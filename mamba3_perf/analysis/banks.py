"""Shared-memory bank conflicts of a Gluon kernel's copies between registers and shared memory,
counted while it compiles (static: no GPU, no run).

Every ``.store`` / ``.load`` of a shared-memory descriptor and every ``allocate_shared_memory``
with a value in a Gluon kernel copies a register tensor of some distributed layout to or from a
buffer of some shared layout. How many shared-memory wavefronts each ``st.shared`` / ``ld.shared``
it becomes takes beyond the ideal depends only on the two layouts, the shape and the element
width; Triton's ``gluon.language.bank_conflicts`` computes it. Nsight Compute measures the same
thing per SASS instruction ("excess shared wavefronts" on the source page, the ``Shared``
columns :func:`mamba3_perf.analysis.sass.read_source_page` keeps): the transposed stores of the
Gluon kernels were measured at two wavefronts where one would do (README, "Where the Gluon
kernels' instructions go").

:func:`recording` patches Gluon's code generator so that each such copy, as it is generated, is
counted with the source lines it comes from (the kernel's line, and a helper's where the copy
sits in one) and how many loops enclose it, both by Triton's count and by :func:`wavefronts`
(this module's model of the same, which also gives the wavefronts in all, the ideal and the
instructions); :func:`compile_with_accesses` compiles one captured launch
(:mod:`mamba3_perf.kernels.codegen`) under it. ``benchmarks/ptxas_stage.py --banks`` prints
:func:`summary` for every Gluon kernel a stage launches, ``python -m mamba3_perf.kernels.codegen
compile ... --banks`` adds it to each kernel's JSON line.

TMA copies and wgmma operand reads do not pass through registers and are not counted here.
Triton's count does not cover a copy into a sub-slice of a buffer (``slice``; its row says so in
``note``); the model counts it as a buffer of the slice's shape, which it is where the slice
starts on a whole swizzle pattern (a multiple of 8 rows, as every slice of these kernels does).
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import os
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass

import pandas as pd

COLUMNS = ("kind", "line", "via", "loops", "shape", "dtype", "register_layout", "shared_layout",
           "conflicts", "vector", "instructions", "wavefronts", "ideal", "note")


@dataclass
class Access:
    """One register <-> shared copy of a kernel, as generated."""

    kind: str  # "store", "load" or "alloc" (allocate_shared_memory with a value: a store)
    line: str  # file:line of the kernel's statement that makes it
    via: str  # file:line inside the helper that makes it, "" where the kernel makes it itself
    loops: int  # for / while loops around it (unrolled static_range loops excluded)
    shape: str
    dtype: str
    register_layout: str
    shared_layout: str
    conflicts: int | None  # Triton's count: excess wavefronts per wavefront; None where not counted
    vector: int | None  # elements per st.shared / ld.shared (the model's, :func:`wavefronts`)
    instructions: int | None  # st.shared / ld.shared per thread
    wavefronts: float | None  # shared-memory wavefronts per warp, all of them
    ideal: float | None  # the least those instructions could take
    note: str = ""


MODEL_FIELDS = ("vector", "instructions", "wavefronts", "ideal")
# what summary() rows carry beside the layouts (codegen's --banks JSON)
BANK_FIELDS = ("kind", "line", "via", "loops", "shape", "dtype", "conflicts", *MODEL_FIELDS, "excess", "note")


def standalone_builder():
    """A Gluon IR builder outside any kernel: enough to turn layouts into linear layouts."""
    from triton._C.libtriton import gluon_ir, ir

    context = ir.context()
    ir.load_dialects(context)
    builder = gluon_ir.GluonOpBuilder(context)
    builder._context = context  # kept alive with the builder
    return builder


def nvmma_offset(coord, shape, swizzle_bytes: int, bits: int) -> int:
    """Byte offset of element ``coord`` = (row, column) of a [rows, columns] buffer in an NVMMA
    shared layout (not transposed) of ``swizzle_bytes`` = 32, 64 or 128: the columns split into
    blocks one swizzle row wide, each block all rows after another, and in each 128-byte line the
    16-byte chunk index XORed with the line's position in its group (the wgmma / TMA swizzle)."""
    per_row = swizzle_bytes * 8 // bits
    block, col = divmod(coord[1], per_row)
    offset = block * shape[0] * swizzle_bytes + coord[0] * swizzle_bytes + col * bits // 8
    return offset ^ (((offset >> 7) & (swizzle_bytes // 16 - 1)) << 4)


def _coords(linear, register: int, lane: int, warp: int) -> list[int]:
    coord = [0] * len(linear.shape)
    for bases, index in ((linear.reg_bases, register), (linear.lane_bases, lane), (linear.warp_bases, warp)):
        for k, basis in enumerate(bases):
            if index >> k & 1:
                coord = [a ^ b for a, b in zip(coord, basis)]
    return coord


def wavefronts(builder, register_layout, shared_layout, shape, bits: int) -> dict | None:
    """Shared-memory wavefronts of one copy between ``register_layout`` and ``shared_layout``
    (a 2-D NVMMA layout, not transposed; None for any other), per warp (mean over the warps).

    The model: each thread moves its elements in vectors of the consecutive registers that are
    consecutive in shared memory (up to 16 bytes); a warp's vector access is served a phase at a
    time (32 lanes for 4 bytes a lane, 16 for 8, 8 for 16), and a phase takes as many wavefronts
    as the most distinct 4-byte words any one of the 32 banks holds for it (lanes reading the same
    word share it). ``ideal`` is one wavefront a phase. Its excess agrees with Triton's
    ``bank_conflicts`` (tests/analysis/test_banks.py)."""
    from triton.experimental.gluon.language import NVMMASharedLayout

    if (not isinstance(shared_layout, NVMMASharedLayout) or shared_layout.transposed or len(shape) != 2
            or shared_layout.swizzle_byte_width not in (32, 64, 128)
            or shape[1] % (shared_layout.swizzle_byte_width * 8 // bits)):
        return None
    sw = shared_layout.swizzle_byte_width
    linear = builder.to_linear_layout(register_layout._to_ir(builder), list(shape))
    nreg = 1 << len(linear.reg_bases)
    base = nvmma_offset(_coords(linear, 0, 0, 0), shape, sw, bits)
    vector = 1
    while (vector * 2 * bits <= 128 and vector < nreg and nvmma_offset(
            _coords(linear, vector, 0, 0), shape, sw, bits) - base == vector * bits // 8):
        vector *= 2
    nbytes = vector * bits // 8
    lanes = 32 if nbytes <= 4 else 128 // nbytes
    nwarps = 1 << len(linear.warp_bases)
    total = ideal = 0
    for warp in range(nwarps):
        for register in range(0, nreg, vector):
            for first in range(0, 32, lanes):
                banks: dict[int, set[int]] = {}
                for lane in range(first, first + lanes):
                    offset = nvmma_offset(_coords(linear, register, lane, warp), shape, sw, bits)
                    for word in range(offset // 4, (offset + nbytes + 3) // 4):
                        banks.setdefault(word % 32, set()).add(word)
                total += max(len(words) for words in banks.values())
                ideal += 1
    return {"vector": vector, "instructions": nreg // vector, "wavefronts": total / nwarps,
            "ideal": ideal / nwarps}


def _generators():
    """The code generators on the stack, innermost first. (Triton visits a loop's body twice, once
    to find its carried values, and generates a helper once per signature: each site is seen at
    least once, some more than once; :func:`kernel_accesses` keeps one row per site.)"""
    from triton.compiler.code_generator import CodeGenerator

    gens = []
    frame = inspect.currentframe()
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, CodeGenerator) and (not gens or gens[-1] is not owner):
            gens.append(owner)
        frame = frame.f_back
    return gens


def _where(gen) -> str:
    node = gen.cur_node
    line = gen.begin_line + node.lineno if node is not None and hasattr(node, "lineno") else gen.begin_line
    return f"{os.path.basename(gen.file_name or '?')}:{line}"


def _site(gens) -> tuple[str, str, int]:
    loops = sum(isinstance(n, (ast.For, ast.While)) for g in gens for n in g.scf_stack)
    kernel = _where(gens[-1])
    return kernel, (_where(gens[0]) if len(gens) > 1 else ""), loops


def _count(semantic, reg_ty, mem_ty) -> tuple[int | None, str]:
    if tuple(mem_ty.shape) != tuple(mem_ty.alloc_shape[-len(mem_ty.shape):]):
        return None, f"sub-slice of a {list(mem_ty.alloc_shape)} buffer: not counted"
    try:
        return int(semantic.bank_conflicts(reg_ty, mem_ty)), ""
    except Exception as e:  # a layout pair Triton's count does not take
        return None, f"not counted: {e}"


@contextlib.contextmanager
def recording():
    """Inside: every register <-> shared copy Gluon generates is appended to the yielded list."""
    from triton.experimental.gluon.language import _core as gl
    from triton.experimental.gluon.language._semantic import GluonSemantic

    accesses: list[Access] = []
    store, load, alloc = GluonSemantic.shared_store, GluonSemantic.shared_load, GluonSemantic.allocate_shared

    def record(semantic, kind, reg_ty, mem_ty):
        gens = _generators()
        if not gens:
            return
        line, via, loops = _site(gens)
        conflicts, note = _count(semantic, reg_ty, mem_ty)
        model = wavefronts(semantic.builder, reg_ty.layout, mem_ty.layout, list(mem_ty.shape),
                           mem_ty.element_ty.primitive_bitwidth)
        accesses.append(Access(kind, line, via, loops, "x".join(map(str, mem_ty.shape)), str(mem_ty.element_ty),
                               str(reg_ty.layout), str(mem_ty.layout), conflicts,
                               **(model or dict.fromkeys(MODEL_FIELDS)), note=note))

    def shared_store(self, mem_desc, value):
        record(self, "store", value.type, mem_desc.type)
        return store(self, mem_desc, value)

    def shared_load(self, mem_desc, layout):
        out = load(self, mem_desc, layout)
        record(self, "load", out.type, mem_desc.type)
        return out

    def allocate_shared(self, element_ty, shape, layout, value):
        out = alloc(self, element_ty, shape, layout, value)
        if value is not None and isinstance(value.type, gl.distributed_type):
            record(self, "alloc", value.type, out.type)
        return out

    GluonSemantic.shared_store, GluonSemantic.shared_load = shared_store, shared_load
    GluonSemantic.allocate_shared = allocate_shared
    try:
        yield accesses
    finally:
        GluonSemantic.shared_store, GluonSemantic.shared_load, GluonSemantic.allocate_shared = store, load, alloc


def compile_with_accesses(fn, args: tuple, kwargs: dict, **compile_opts):
    """Compile one captured launch (``codegen.capture_launches``) for sm_90 as
    ``codegen.compile_launch`` does, past the JIT's caches (memory and disk) so that the front end
    runs, and
    return (compiled kernel, launch options, its register <-> shared copies): one row each time the
    front end generated one, in that order (a loop's body is generated twice, an unrolled loop's
    once per iteration; :func:`summary` keeps one row per site); no rows for a kernel that is not
    Gluon."""
    from mamba3_perf.kernels.codegen import compile_launch

    held = fn.device_caches  # the JIT's compiled kernels in memory: bypassed, kept for later launches
    fn.device_caches = defaultdict(fn.create_binder)
    try:
        with tempfile.TemporaryDirectory() as cache, _env(TRITON_CACHE_DIR=cache), recording() as accesses:
            kernel, opts = compile_launch(fn, args, kwargs, **compile_opts)
    finally:
        fn.device_caches = held
    return kernel, opts, pd.DataFrame([asdict(a) for a in accesses], columns=list(COLUMNS))


def summary(accesses: pd.DataFrame) -> pd.DataFrame:
    """One row per site (kernel line, helper line, kind, layouts), with ``excess`` = wavefronts
    - ideal per warp; the sites in loops first, then by excess."""
    if accesses.empty:
        return accesses.assign(excess=pd.Series(dtype=float))
    keys = ["line", "via", "kind", "shape", "register_layout", "shared_layout"]
    out = accesses.drop_duplicates(keys).reset_index(drop=True)
    out = out.assign(conflicts=out["conflicts"].astype("Int64"), excess=out["wavefronts"] - out["ideal"])
    return (out.assign(_l=-out["loops"], _e=-out["excess"].fillna(-1)).sort_values(["_l", "_e"], kind="stable")
            .drop(columns=["_l", "_e"]).reset_index(drop=True))


@contextlib.contextmanager
def _env(**values):
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
