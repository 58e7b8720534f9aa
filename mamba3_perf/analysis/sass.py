"""Instruction mix of a compiled GPU kernel: static, from its SASS listing (``nvdisasm -c``), and
measured, from Nsight Compute's source page.

What a kernel executes is (roughly) its loop bodies times their trip counts; Nsight Compute
measures the total on the device (``instructions`` in the trace schema), this reads the code
without one. :func:`instruction_mix` counts a kernel's instructions by kind, for the whole
listing and for each loop body (the span from a backward branch's target label to the branch),
so that a kernel change can be judged before it runs: how many instructions one N block or one
chunk step costs, how many of them are spill traffic (``local``), shuffles, address arithmetic.
``benchmarks/ptxas_stage.py --sass`` prints it for every kernel a stage launches.

What a kernel executed and where its warps waited, per instruction, is Nsight Compute's source
page (``ncu --import R --page source --csv --print-source sass``, benchmarks/ncu_source.py):
:func:`read_source_page` reads it into the same rows (plus the measured columns) and
:func:`measured_regions` / :func:`measured_mix` sum it per loop body and per opcode (``perf sass``).

Kinds (by the opcode's first part; uniform-datapath ``U...`` ops count with their base op):
``mma`` tensor-core ops, ``global`` / ``shared`` / ``local`` memory ops (``local`` is LDL /
STL: register spills), ``float`` arithmetic and compares, ``convert``, ``int`` (integer and
address arithmetic, constants, predicates), ``move`` (register copies, MOV / UMOV / R2UR),
``shuffle``, ``control`` (branches, barriers, fences) and ``other``.
"""
from __future__ import annotations

import csv
import gzip
import io
import re
from pathlib import Path

import pandas as pd

from mamba3_perf.errors import ParseError, first_line

KINDS: dict[str, tuple[str, ...]] = {
    "mma": ("HGMMA", "HMMA", "IMMA", "QGMMA", "IGMMA", "WARPGROUP", "WARPSYNC"),
    "global": ("LDG", "STG", "LDGSTS", "LDGDEPBAR", "RED", "ATOM", "ATOMG", "UTMALDG", "UTMASTG",
               "UBLKCP", "UTMAPF"),
    "shared": ("LDS", "STS", "LDSM", "STSM", "ATOMS"),
    "local": ("LDL", "STL"),
    "float": ("FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "MUFU", "FCHK", "HFMA2", "HADD2",
              "HMUL2", "DMUL", "DADD", "DFMA", "FSWZADD"),
    "convert": ("F2F", "F2I", "I2F", "FRND", "F2FP", "I2FP", "F2IP"),
    "int": ("IMAD", "IADD3", "IADD", "LEA", "SHF", "LOP3", "ISETP", "IMNMX", "SEL", "PRMT",
            "IABS", "SGXT", "BMSK", "POPC", "FLO", "VIADD", "VIADDMNMX", "VIMNMX", "IMUL", "S2R",
            "S2UR", "CS2R", "LDC", "PLOP3", "P2R", "R2P", "BREV", "SHL", "SHR"),
    # register copies, within and between the vector and uniform files (MOV, UMOV, R2UR): where a
    # loop keeps more wgmma descriptors than the uniform registers hold, they are moved back before
    # each wgmma (stage30_stepdesc's docstring)
    "move": ("MOV", "R2UR"),
    "shuffle": ("SHFL",),
    "control": ("BAR", "DEPBAR", "MEMBAR", "NOP", "BRA", "BRX", "EXIT", "BSSY", "BSYNC", "YIELD",
                "CALL", "RET", "VOTE", "ELECT", "FENCE", "ERRBAR", "CCTL", "BREAK", "SYNCS",
                "ARRIVES", "ACQBULK", "NANOSLEEP", "BPT"),
}
_KIND_OF = {op: kind for kind, ops in KINDS.items() for op in ops}
KIND_ORDER = tuple(KINDS) + ("other",)

_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)(.*?);")
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
    its modifiers), ``kind``, ``target`` (the address a branch jumps to, else -1), ``guarded``
    (whether a predicate guards it: ``@P0``, ``@!UP1``), ``operands`` (the text after the
    opcode).

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
        t = _TARGET.search(m.group(4))
        rows.append((addr, m.group(3), kind(m.group(3)), t.group(1) if t else "", bool(m.group(2)),
                     m.group(4).strip()))
    if not rows:
        raise ValueError("no SASS instruction found (expected the output of nvdisasm -c)")
    df = pd.DataFrame(rows, columns=["addr", "opcode", "kind", "label", "guarded", "operands"])
    df["target"] = [labels.get(name, -1) if name else -1 for name in df["label"]]
    return df.drop(columns="label")


def loop_spans(df: pd.DataFrame) -> list[tuple[int, int]]:
    """(first, last) instruction addresses of each loop body: a branch back to a label before
    it (not the branch-to-self that ends a listing after EXIT); sorted, duplicates removed."""
    back = df[(df["target"] >= 0) & (df["target"] < df["addr"]) & df["opcode"].str.startswith("BRA")]
    return sorted({(int(t), int(a)) for t, a in zip(back["target"], back["addr"])})


def _parsed(listing: str | pd.DataFrame) -> pd.DataFrame:
    """``listing`` as :func:`parse_sass`'s frame: a listing's text is parsed, a frame that
    function returned is used as it is (a caller running several of the functions below on one
    listing parses it once)."""
    return listing if isinstance(listing, pd.DataFrame) else parse_sass(listing)


def instruction_mix(listing: str | pd.DataFrame) -> pd.DataFrame:
    """Static instruction counts of one kernel's listing by kind: a row ``kernel`` for the whole
    listing, then a row per loop body (``loop 0xSTART-0xEND``); columns ``region``,
    ``instructions`` and one per kind in :data:`KIND_ORDER`."""
    df = _parsed(listing)
    regions = [("kernel", df)] + [(f"loop {s:#x}-{e:#x}", df[(df["addr"] >= s) & (df["addr"] <= e)])
                                  for s, e in loop_spans(df)]
    rows = []
    for name, part in regions:
        counts = part["kind"].value_counts()
        rows.append({"region": name, "instructions": len(part),
                     **{k: int(counts.get(k, 0)) for k in KIND_ORDER}})
    return pd.DataFrame(rows)


def mma_waits(listing: str | pd.DataFrame) -> pd.DataFrame:
    """One row per wgmma wait (``WARPGROUP.DEPBAR``) of a listing: how much of the warp's own
    work the compiler placed between the wgmma it waits for and the wait, i.e. what runs while the
    tensor cores do (the rest of the kernel's overlap comes from other warps). Columns ``addr``;
    ``loop`` (the innermost loop body holding it, ``0xSTART-0xEND``, or "");
    ``issued`` (HGMMA since the previous wait, or, where none precedes it in its loop body, those
    after it in the body: issued in the iteration before, as a software-pipelined loop does);
    ``overlap`` (instructions between the last of them and the wait, around the back edge in
    the second case; -1 where no HGMMA precedes the wait)."""
    df = _parsed(listing)
    spans = loop_spans(df)
    mma = df["opcode"].str.startswith("HGMMA").to_numpy()
    pos_of = {int(a): i for i, a in enumerate(df["addr"])}
    rows, prev = [], -1
    for i in [i for i, op in enumerate(df["opcode"]) if op.startswith("WARPGROUP.DEPBAR")]:
        addr = int(df["addr"].iloc[i])
        inner = [(s, e) for s, e in spans if s <= addr <= e]
        span = min(inner, key=lambda se: se[1] - se[0]) if inner else None
        before = [k for k in range(prev + 1, i) if mma[k]]
        own = [k for k in before if k >= pos_of[span[0]]] if span else before  # in its loop body
        after = [k for k in range(i + 1, pos_of[span[1]] + 1) if mma[k]] if span and not own else []
        if own:
            issued, overlap = len(own), i - own[-1] - 1
        elif after:
            issued, overlap = len(after), (pos_of[span[1]] - after[-1]) + (i - pos_of[span[0]])
        elif before:  # none in its own body: the last HGMMA before it
            issued, overlap = len(before), i - before[-1] - 1
        else:
            issued, overlap = 0, -1
        rows.append({"addr": addr, "loop": f"{span[0]:#x}-{span[1]:#x}" if span else "", "issued": issued,
                     "overlap": overlap})
        prev = i
    return pd.DataFrame(rows, columns=["addr", "loop", "issued", "overlap"])


# opcodes that write predicates, not vector registers, though a register follows their predicate
# operands (ISETP P0, PT, R1, ...)
_PREDICATE_ONLY = {"ISETP", "FSETP", "DSETP", "HSETP2", "PSETP", "PLOP3", "FCHK", "R2P"}
_PRED_OPERAND = re.compile(r"!?U?P[T0-9]+")
_VREG = re.compile(r"R(\d+)(?:\.[A-Za-z0-9_]+)*")


def written_registers(opcode: str, operands: str) -> range:
    """The vector registers (R numbers) an instruction writes: its destination, the first operand
    after any predicate destinations, where that is a register; wider where the opcode says so
    (.64 / .WIDE / double-precision arithmetic: 2, .128 or LDSM's .4: 4). Stores, branches,
    barriers, compares into predicates and uniform-datapath ops (which write UR registers) write
    none; nor HGMMA, whose destination is its accumulator."""
    base = opcode.split(".")[0]
    if base in _PREDICATE_ONLY or base.startswith("U") or base in ("HGMMA", "WARPGROUP"):
        return range(0)
    ops = [o.strip() for o in operands.split(",")]
    i = 0
    while i < len(ops) and _PRED_OPERAND.fullmatch(ops[i]):
        i += 1
    m = _VREG.fullmatch(ops[i]) if i < len(ops) else None
    if not m:
        return range(0)
    mods = opcode.split(".")[1:]
    width = 1
    if "128" in mods or (base == "LDSM" and "4" in mods):
        width = 4
    elif "64" in mods or "WIDE" in mods or (base == "LDSM" and "2" in mods) or base in ("DMUL", "DADD", "DFMA") \
            or (base == "CS2R" and "32" not in mods):
        width = 2
    first = int(m.group(1))
    return range(first, first + width)


def _successors(df: pd.DataFrame, pos_of: dict[int, int], k: int) -> list[int]:
    op, target, guarded = df["opcode"].iat[k], int(df["target"].iat[k]), bool(df["guarded"].iat[k])
    nxt = [k + 1] if k + 1 < len(df) else []
    if op.startswith("BRA") and target >= 0 and target in pos_of:
        return [pos_of[target]] + (nxt if guarded else [])
    if op.startswith("EXIT") and not guarded:
        return []
    return nxt


def mma_register_hazards(listing: str | pd.DataFrame) -> pd.DataFrame:
    """Where a listing writes a wgmma's register operand before the wgmma is waited for. A
    wgmma whose A operand comes from registers (``HGMMA.64x64x8.F32.TF32 R24, R76, gdesc[UR8],
    ...``: A in R76..R79) reads them while it runs, until a ``WARPGROUP.DEPBAR.LE gsb0, 0x0``;
    PTX leaves writing them before that wait undefined, and in a loop the next iteration's A
    operands are the same registers (a software-pipelined walk that forms them under the wgmma
    computed wrong gradients that way on an H100: terms_gluon's ``_step_a``). From each such
    HGMMA this follows every path of the listing (branches both ways, around back edges) up to
    the first wait for all groups, and reports each instruction on it that writes one of the A
    registers. A wait that leaves groups outstanding (``0x1``) does not end a path: the check
    errs towards reporting. Columns ``mma_addr``, ``a_regs`` (``R76-R79``), ``addr``,
    ``opcode``, ``register``; empty where none."""
    df = _parsed(listing)
    pos_of = {int(a): i for i, a in enumerate(df["addr"])}
    waits = {i for i, (op, o) in enumerate(zip(df["opcode"], df["operands"]))
             if op.startswith("WARPGROUP.DEPBAR") and o.replace(" ", "").endswith(",0x0")}
    rows = []
    for i, (op, operands) in enumerate(zip(df["opcode"], df["operands"])):
        if not op.startswith("HGMMA"):
            continue
        parts = [o.strip() for o in operands.split(",")]
        m = _VREG.fullmatch(parts[1]) if len(parts) > 1 else None
        if not m:
            continue  # A from shared memory (gdesc): nothing in registers to guard
        a = range(int(m.group(1)), int(m.group(1)) + 4)  # an m64 x k-slice A fragment: 4 registers a thread
        seen, todo = set(), _successors(df, pos_of, i)
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            if k in waits:
                continue
            hit = set(written_registers(df["opcode"].iat[k], df["operands"].iat[k])) & set(a)
            for r in sorted(hit):
                rows.append({"mma_addr": int(df["addr"].iat[i]), "a_regs": f"R{a.start}-R{a.stop - 1}",
                             "addr": int(df["addr"].iat[k]), "opcode": df["opcode"].iat[k], "register": f"R{r}"})
            todo.extend(_successors(df, pos_of, k))
    return pd.DataFrame(rows, columns=["mma_addr", "a_regs", "addr", "opcode", "register"])


# the source page's columns this module reads, by the names ncu 2025.3 gives them
_PAGE_COLUMNS = {
    "Address": "address", "Source": "source", "Warp Stall Sampling (All Samples)": "samples",
    "Warp Stall Sampling (Not-issued Samples)": "samples_not_issued", "Instructions Executed": "executed",
    "L1 Wavefronts Shared": "smem_wavefronts", "L1 Wavefronts Shared Excessive": "smem_excess_wavefronts",
}
_OPCODE = re.compile(r"^\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")
_HEX = re.compile(r"0x([0-9a-f]+)")


def read_text(path) -> str:
    """The text of an ncu source page or an nvdisasm listing file, un-gzipped where its name ends
    in .gz. Raises ParseError where it cannot be read (missing, cut-off gzip, not text)."""
    path = Path(path)
    try:
        return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ParseError(f"{path.name}: cannot read ({first_line(e)}): it cannot be read as text, gzipped "
                         f"or plain") from e


def is_listing(text: str) -> bool:
    """Whether ``text`` is an ``nvdisasm -c`` listing: a line :func:`parse_sass` reads as an
    instruction."""
    return any(_INSTR.match(line) for line in text.splitlines())


def read_source_page(source) -> pd.DataFrame:
    """One row per SASS instruction of an ncu source page (CSV: a path, gzipped where it ends in
    .gz, or its text): ``addr`` (bytes from the kernel's first instruction), ``opcode``, ``kind``,
    ``target`` (a branch's target, same offsets, else -1), ``samples`` / ``samples_not_issued`` (warp stall samples at
    the instruction), ``executed`` (warp-level instructions executed), ``smem_wavefronts`` /
    ``smem_excess_wavefronts`` (shared-memory wavefronts, and those beyond the ideal: bank
    conflicts) and a ``stall_REASON`` column per stall reason ncu sampled (all samples).

    Raises ParseError (a ValueError) for text that is not a SASS source page, is cut off (a row
    without the header's fields) or lacks the columns read here."""
    return parse_source_page(read_text(source) if isinstance(source, Path) or "\n" not in str(source)
                             else str(source))


def parse_source_page(text: str) -> pd.DataFrame:
    """:func:`read_source_page` of a page's text already read (``read_text``)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines[:5]) if line.startswith('"Address","Source"')), None)
    if start is None:
        raise ParseError("not an ncu source page: no \"Address\",\"Source\" header in its first lines "
                         "(expected ncu --page source --csv --print-source sass)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], [r for r in rows[1:] if r]
    short = next((n for n, r in enumerate(body, start + 2) if len(r) != len(header)), None)
    if short is not None:
        raise ParseError(f"ncu source page cut off: line {short} has not the header's {len(header)} fields")
    missing = [c for c in _PAGE_COLUMNS if c not in header]
    if missing:
        raise ParseError(f"ncu source page without the columns {missing} (collect the SourceCounters and "
                         f"WarpStateStats sections)")
    raw = pd.DataFrame(body, columns=header)
    raw = raw[raw["Address"].str.startswith("0x")]
    if raw.empty:
        raise ParseError("ncu source page without SASS rows")
    stalls = [c for c in raw.columns if c.startswith("stall_") and "(" not in c]
    df = raw[list(_PAGE_COLUMNS) + stalls].rename(columns=_PAGE_COLUMNS)
    for c in df.columns[2:]:
        df[c] = pd.to_numeric(df[c].replace("-", "0"), errors="coerce").fillna(0)
    absolute = df["address"].map(lambda a: int(a, 16))
    base = int(absolute.min())
    df["addr"] = absolute - base
    df["opcode"] = [m.group(1) if (m := _OPCODE.match(t)) else "UNKNOWN" for t in df["source"]]
    df["kind"] = df["opcode"].map(kind)
    df["target"] = [int(m.group(1), 16) - base if op.startswith("BRA") and (m := _HEX.search(t.split("BRA", 1)[1]))
                    else -1 for op, t in zip(df["opcode"], df["source"])]
    lead = ["addr", "opcode", "kind", "target", "samples", "samples_not_issued", "executed",
            "smem_wavefronts", "smem_excess_wavefronts"]
    return df[lead + stalls].reset_index(drop=True)


def _summary(part: pd.DataFrame, total: pd.Series, stalls: list[str], top: int) -> dict:
    st = part[stalls].sum().sort_values(ascending=False)
    share = lambda col: 100 * float(part[col].sum()) / max(float(total[col]), 1.0)  # noqa: E731
    return {"instructions": len(part), "executed_%": share("executed"), "samples_%": share("samples"),
            "smem_excess_%": share("smem_excess_wavefronts"), "mma": int((part["kind"] == "mma").sum()),
            "top_stalls": ", ".join(f"{k[6:]} {100 * v / max(float(total['samples']), 1.0):.1f}"
                                    for k, v in st.head(top).items() if v > 0)}


def measured_regions(df: pd.DataFrame, top: int = 3) -> pd.DataFrame:
    """:func:`instruction_mix`'s regions (the kernel, each loop body) of a source page
    (:func:`read_source_page`), measured: ``instructions`` (static), the region's shares of the
    kernel's executed instructions, stall samples and excess shared wavefronts (bank
    conflicts), its mma instructions, and its ``top`` stall reasons (% of the kernel's samples).
    A backward branch from an out-of-line block (an mbarrier wait's retry) spans most of the
    kernel: that row is a region like the others, read it as such."""
    stalls = [c for c in df.columns if c.startswith("stall_")]
    total = df[["executed", "samples", "smem_excess_wavefronts"]].sum()
    regions = [("kernel", df)] + [(f"loop {s:#x}-{e:#x}", df[(df["addr"] >= s) & (df["addr"] <= e)])
                                  for s, e in loop_spans(df)]
    return pd.DataFrame([{"region": name, **_summary(part, total, stalls, top)} for name, part in regions])


def measured_mix(df: pd.DataFrame) -> pd.DataFrame:
    """A source page's executed instructions, stall samples and excess shared wavefronts per
    opcode (its first part) and kind, as % of the kernel's, sorted by samples."""
    base = df.assign(op=df["opcode"].str.split(".").str[0])
    g = base.groupby(["op", "kind"], as_index=False)[["executed", "samples", "smem_excess_wavefronts"]].sum()
    for col in ("executed", "samples", "smem_excess_wavefronts"):
        g[col + "_%"] = 100 * g.pop(col) / max(float(df[col].sum()), 1.0)
    g.insert(2, "instructions", base.groupby(["op", "kind"]).size().values)
    return g.sort_values("samples_%", ascending=False, ignore_index=True)
