"""kernels.launching: a kernel's second launch with the same key goes through its compiled
kernel's launcher with the arguments in the JIT's bound order; whatever changes the JIT's
specialization, or what the key cannot describe, goes through the JIT again. Triton's JIT here
runs against codegen's stand-in sm_90 driver (its binder, the real one, orders the arguments),
with ``run`` (compile and launch) replaced by a recorder: no GPU."""
import pytest
import torch
import triton.language as tl
from triton import knobs
from triton.runtime.jit import JITFunction

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.codegen import SM90, _stand_in_driver


def _kernel(X, Y, n, BLOCK: tl.constexpr, FLAG: tl.constexpr = 3):
    pass


class _Compiled:
    function, packed_metadata = "function", "packed"

    def __init__(self):
        self.launches = []

    def run(self, *args):
        self.launches.append(args)


@pytest.fixture
def jit(monkeypatch):
    """(kernel, the JIT path's calls: (args, kwargs, the compiled kernel it returned))."""
    calls = []

    def run(self, *args, grid, warmup, **kwargs):
        compiled = _Compiled()
        calls.append((args, kwargs, compiled))
        return compiled

    monkeypatch.setattr(JITFunction, "run", run)
    monkeypatch.setattr(launching, "_JIT_RUN", run)
    monkeypatch.setattr(launching, "_COMPILED", {})
    with _stand_in_driver(SM90):
        yield JITFunction(_kernel), calls


def _tensors():
    buf = torch.zeros(64)
    return buf[:32], buf[32:]  # both 16-byte aligned (128 B apart)


def test_second_launch_goes_through_the_compiled_launcher(jit):
    kernel, calls = jit
    x, y = _tensors()
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    assert len(calls) == 1
    compiled = calls[0][2]
    launching.launch(kernel, (4, 2))(y, x, 48, BLOCK=16)
    assert len(calls) == 1  # no second JIT call
    (launch,) = compiled.launches
    assert launch[:9] == (4, 2, 1, 0, "function", "packed", None, None, None)
    assert launch[9:] == (y, x, 48, 16, 3)  # positional, then BLOCK and FLAG's default, bound order


@pytest.mark.parametrize("change", ["misaligned", "n_is_one", "n_not_16", "dtype", "constexpr", "option"])
def test_what_the_jit_specializes_on_takes_the_jit_again(jit, change):
    kernel, calls = jit
    x, y = _tensors()
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    args, kw = [x, y, 32], dict(BLOCK=16)
    if change == "misaligned":
        args[0] = x[1:]
    elif change == "n_is_one":
        args[2] = 1
    elif change == "n_not_16":
        args[2] = 33
    elif change == "dtype":
        args[1] = y.double()
    elif change == "constexpr":
        kw["BLOCK"] = 32
    else:
        kw["num_warps"] = 8
    launching.launch(kernel, (4,))(*args, **kw)
    assert len(calls) == 2 and not calls[0][2].launches


def test_runtime_arguments_by_name_are_taken_from_each_launch(jit):
    """A tensor passed by name (the post kernels' GDB_S) is keyed like a positional one and read
    from each launch's keywords; no key or entry holds a tensor."""
    kernel, calls = jit
    x, y = _tensors()
    z = torch.zeros(8)
    launching.launch(kernel, (4,))(x, Y=y, n=32, BLOCK=16)
    launching.launch(kernel, (4,))(x, Y=z, n=48, BLOCK=16)
    assert len(calls) == 1
    assert calls[0][2].launches[0][9:] == (x, z, 48, 16, 3)
    held = [v for key, entry in launching._COMPILED.items() for v in (*key, *entry[2])]
    assert not any(isinstance(v, torch.Tensor) or (isinstance(v, tuple) and any(isinstance(u, torch.Tensor) for u in v))
                   for v in held)


def test_an_unkeyed_argument_takes_the_jit(jit):
    kernel, calls = jit
    x, y = _tensors()
    for _ in range(2):
        launching.launch(kernel, (4,))(x, y, "thirty-two", BLOCK=16)
    assert len(calls) == 2


def test_a_launch_hook_or_a_replaced_run_takes_the_jit(jit, monkeypatch):
    kernel, calls = jit
    x, y = _tensors()
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    hook = lambda *a: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)  # as a profiler (proton) adds its own
    try:
        launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    intercepted = []
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, grid, warmup, **kw: intercepted.append(a))
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)  # as kernels.codegen intercepts launches
    assert len(calls) == 2 and len(intercepted) == 1 and not calls[0][2].launches


def test_a_changed_global_takes_the_jit(jit):
    kernel, calls = jit
    x, y = _tensors()
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    scope = {"WIDTH": 1}  # a global the kernel read when it was compiled, since changed
    kernel.used_global_vals = {("WIDTH", id(scope)): (1, scope)}
    scope["WIDTH"] = 2
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    assert len(calls) == 2


def test_not_a_jit_function_is_launched_as_it_is():
    seen = []

    class Interpreted:
        def __getitem__(self, grid):
            return lambda *a, **kw: seen.append((grid, a, kw))

    launching.launch(Interpreted(), (2,))(1, X=3)
    assert seen == [((2,), (1,), {"X": 3})]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled kernels launch on a GPU only")
@pytest.mark.parametrize("stage", ["stage30_stepdesc", "stage16_regcap", "stage0"])
@pytest.mark.parametrize("case_id", ["hop-fp16-noD", "hop-C8"])
def test_launches_through_compiled_launchers_match_the_golden(stage, case_id):
    """The second call of a stage on the same inputs launches every kernel through its compiled
    launcher (the first compiled them through the JIT) and passes the golden check again."""
    from mamba3_perf.bench import prepare
    from mamba3_perf.kernels import get_case
    from mamba3_perf.kernels.checking import check_stage

    case = get_case(case_id)
    x = prepare(case, device="cuda")
    check_stage(stage, case, device="cuda", inputs=x)
    before = {k: v for k, v in launching._COMPILED.items() if v is not None}
    rows = check_stage(stage, case, device="cuda", inputs=x)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
    assert before and {k: v for k, v in launching._COMPILED.items() if v is not None} == before


def test_an_entry_left_by_another_kernel_of_the_same_id_is_replaced(jit):
    """Keys hold a kernel by id; an entry whose kernel is not this one (a freed kernel's id
    reused) is never launched, and the JIT's result takes its place."""
    kernel, calls = jit
    x, y = _tensors()
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    (key,) = launching._COMPILED
    launching._COMPILED[key] = (object(),) + launching._COMPILED[key][1:]
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    launching.launch(kernel, (4,))(x, y, 32, BLOCK=16)
    assert len(calls) == 2 and not calls[0][2].launches and len(calls[1][2].launches) == 1
