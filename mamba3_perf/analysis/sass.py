"""Static instruction mix of a compiled GPU kernel, from its SASS listing (``nvdisasm -c``).

What a kernel executes is (roughly) its loop bodies times their trip counts; Nsight Compute
measures the total on the device (``instructions`` in the trace schema), this reads the code
without one. :func:`instruction_mix` counts a kernel's instructions by kind, for the whole
listing and for each loop body (the span from a backward branch's target label to the branch),
so that a kernel change can be judged before it runs: how many instructions one N block or one
chunk step costs, how many of them are spill traffic (``local``), shuffles, address arithmetic.
``benchmarks/ptxas_stage.py --sass`` prints it for every kernel a stage launches.

Kinds (by the opcode's first part; uniform-datapath ``U...`` ops count with their base op):
``mma`` tensor-core ops, ``global`` / ``shared`` / ``local`` memory ops (``local`` is LDL /
STL: register spills), ``float`` arithmetic and compares, ``convert``, ``int`` (integer and
address arithmetic, moves, constants, predicates), ``shuffle``, ``control`` (branches,
barriers, fences) and ``other``.
"""
from __future__ import annotations

import re

import pandas as pd

KINDS: dict[str, tuple[str, ...]] = {
    "mma": ("HGMMA", "HMMA", "IMMA", "QGMMA", "IGMMA", "WARPGROUP", "WARPSYNC"),
    "global": ("LDG", "STG", "LDGSTS", "LDGDEPBAR", "RED", "ATOM", "ATOMG", "UTMALDG", "UTMASTG",
               "UBLKCP", "UTMAPF"),
    "shared": ("LDS", "STS", "LDSM", "STSM", "ATOMS"),
    "local": ("LDL", "STL"),
    "float": ("FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "MUFU", "FCHK", "HFMA2", "HADD2",
              "HMUL2", "DMUL", "DADD", "DFMA", "FSWZADD"),
    "convert": ("F2F", "F2I", "I2F", "FRND", "F2FP", "I2FP", "F2IP"),
    "int": ("IMAD", "IADD3", "IADD", "LEA", "SHF", "LOP3", "ISETP", "IMNMX", "SEL", "PRMT", "MOV",
            "IABS", "SGXT", "BMSK", "POPC", "FLO", "VIADD", "VIADDMNMX", "VIMNMX", "IMUL", "S2R",
            "S2UR", "CS2R", "R2UR", "LDC", "PLOP3", "P2R", "R2P", "BREV", "SHL", "SHR"),
    "shuffle": ("SHFL",),
    "control": ("BAR", "DEPBAR", "MEMBAR", "NOP", "BRA", "BRX", "EXIT", "BSSY", "BSYNC", "YIELD",
                "CALL", "RET", "VOTE", "ELECT", "FENCE", "ERRBAR", "CCTL", "BREAK", "SYNCS",
                "ARRIVES", "ACQBULK", "NANOSLEEP", "BPT"),
}
_KIND_OF = {op: kind for kind, ops in KINDS.items() for op in ops}
KIND_ORDER = tuple(KINDS) + ("other",)

_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)(.*?);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def kind(opcode: str) -> str:
    """The kind of an opcode such as ``IMAD.WIDE.U32`` or ``ULDC.64``."""
    base = opcode.split(".")[0]
    if base in _KIND_OF:
        return _KIND_OF[base]
    if base.startswith("U") and base[1:] in _KIND_OF:
        return _KIND_OF[base[1:]]
    return "other"


def parse_sass(text: str) -> pd.DataFrame:
    """One row per instruction of a ``nvdisasm -c`` listing: ``addr`` (int), ``opcode`` (with
    its modifiers), ``kind``, ``target`` (the address a branch jumps to, else -1).

    Raises ValueError when the text holds no instruction (not a SASS listing)."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    rows = []
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for name in pending:
            labels[name] = addr
        pending = []
        t = _TARGET.search(m.group(3))
        rows.append((addr, m.group(2), kind(m.group(2)), t.group(1) if t else ""))
    if not rows:
        raise ValueError("no SASS instruction found (expected the output of nvdisasm -c)")
    df = pd.DataFrame(rows, columns=["addr", "opcode", "kind", "label"])
    df["target"] = [labels.get(name, -1) if name else -1 for name in df["label"]]
    return df.drop(columns="label")


def loop_spans(df: pd.DataFrame) -> list[tuple[int, int]]:
    """(first, last) instruction addresses of each loop body: a branch back to a label before
    it (not the branch-to-self that ends a listing after EXIT); sorted, duplicates removed."""
    back = df[(df["target"] >= 0) & (df["target"] < df["addr"]) & df["opcode"].str.startswith("BRA")]
    return sorted({(int(t), int(a)) for t, a in zip(back["target"], back["addr"])})


def instruction_mix(text: str) -> pd.DataFrame:
    """Static instruction counts of one kernel's listing by kind: a row ``kernel`` for the whole
    listing, then a row per loop body (``loop 0xSTART-0xEND``); columns ``region``,
    ``instructions`` and one per kind in :data:`KIND_ORDER`."""
    df = parse_sass(text)
    regions = [("kernel", df)] + [(f"loop {s:#x}-{e:#x}", df[(df["addr"] >= s) & (df["addr"] <= e)])
                                  for s, e in loop_spans(df)]
    rows = []
    for name, part in regions:
        counts = part["kind"].value_counts()
        rows.append({"region": name, "instructions": len(part),
                     **{k: int(counts.get(k, 0)) for k in KIND_ORDER}})
    return pd.DataFrame(rows)
