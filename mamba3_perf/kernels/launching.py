"""Launching the kernels: ``launch(kernel, grid)(*args, **constexprs)`` is ``kernel[grid](...)``,
the second and later times through the compiled kernel's own launcher.

Triton's JIT spends tens of microseconds of host time on every launch before the launcher runs:
it binds the arguments, specializes each (dtype, 16-byte alignment, integer divisibility), builds
its cache key from them and the options and looks the kernel up. Measured on an H100 machine's
host (benchmarks/host_overhead.py --launches, records/h100-host-launches-2022889.json), one call
of stage26 on N128_P64_R1_C64 spent 362 µs in its six launches through the JIT against 112 µs
through the compiled kernels' launchers with the same arguments, beside 737 µs of device time: on
such a host the JIT alone makes the call host-bound.

Here the first launch of a kernel with a given key goes through the JIT (which compiles it and
returns the compiled kernel); the key is what the JIT specializes on, formed from the arguments
in Python: per tensor its dtype and 16-byte alignment, per integer whether it is 1, a multiple of
16 and within 32 bits (positional or by name alike), the constexpr keywords and the launch
options by value, the device, and the JIT's debug and instrumentation settings; it holds no
tensor. Later launches with the same key call the compiled kernel's launcher directly, with the
arguments in the order the JIT bound them. Anything this key
cannot describe (an argument of another type, an unhashable constexpr value), a launch hook, a pre-run hook, a changed global the kernel
read when it was compiled, or a JIT whose ``run`` has been replaced (kernels.codegen intercepts
it) takes the JIT's own path, as does every kernel on the interpreter.
"""
from __future__ import annotations

import torch

try:
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction
    from triton.tools.tensor_descriptor import TensorDescriptor as _ToolsDescriptor
except ImportError:  # pragma: no cover - a Triton without them: every launch through the JIT
    JITFunction = None
    _ToolsDescriptor = ()
try:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as _GluonDescriptor
except ImportError:  # pragma: no cover - a Triton without Gluon's Hopper module
    _GluonDescriptor = ()

_JIT_RUN = JITFunction.run if JITFunction is not None else None
_DESCRIPTORS = tuple(t for t in (_ToolsDescriptor, _GluonDescriptor) if isinstance(t, type))
# launch keywords that are the JIT's options, not kernel parameters
_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug",
                      "launch_cooperative_grid", "launch_pdl"})
_I32 = (-2 ** 31, 2 ** 31)


class _Unkeyed(Exception):
    """An argument the key does not describe: the launch takes the JIT's path."""


# key (its kernel by id) -> (the kernel, checked to be the same object, its compiled kernel, what
# the JIT binds after the positional arguments: _bind_tail's); None where the JIT's path must be
# taken
_COMPILED: dict = {}


def _arg_key(a):
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    t = type(a)
    if t is bool:
        return t, a
    if t is int:
        return t, a == 1, a % 16 == 0, _I32[0] <= a < _I32[1]
    if t is float or a is None:
        return t
    if isinstance(a, _DESCRIPTORS):
        return t, a.base.dtype, tuple(a.block_shape), getattr(a, "layout", None)
    raise _Unkeyed


def _hooked(hook) -> bool:
    """Whether a launch hook is set: Triton's hooks are chains (HookChain), empty unless a
    profiler such as proton adds to them (older Tritons: None or a function)."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _fast(kernel) -> bool:
    return (_JIT_RUN is not None and isinstance(kernel, JITFunction) and type(kernel).run is _JIT_RUN
            and not getattr(kernel, "pre_run_hooks", None) and not _hooked(knobs.runtime.launch_enter_hook)
            and not _hooked(knobs.runtime.launch_exit_hook))


def _globals_unchanged(kernel) -> bool:
    missing = object()
    return all(g.get(name, missing) == val for (name, _), (val, g) in kernel.used_global_vals.items())


# kernel id -> (the kernel, the keywords a key holds by value: its constexpr parameters and the
# launch options; any other keyword is a runtime argument passed by name, keyed as a positional
# one is)
_BY_VALUE: dict = {}


def _by_value(kernel) -> frozenset:
    entry = _BY_VALUE.get(id(kernel))
    if entry is None or entry[0] is not kernel:
        entry = _BY_VALUE[id(kernel)] = (kernel, _OPTIONS | {p.name for p in kernel.params if p.is_constexpr})
    return entry[1]


def _bind_tail(kernel, device, args: tuple, kwargs: dict, by_value: frozenset) -> tuple:
    """What the JIT binds after ``args``, in its order: (True, name) for a runtime argument passed
    by name (taken from each launch's keywords), (False, value) for a constexpr or a default."""
    bound = kernel.device_caches[device][4](*args, **kwargs)[0]
    return tuple((True, n) if n in kwargs and n not in by_value else (False, v)
                 for n, v in list(bound.items())[len(args):])


def launch(kernel, grid):
    """``kernel[grid]``: a callable launching ``kernel`` on ``grid`` with its arguments (module
    docstring)."""
    if not _fast(kernel):
        return kernel[grid]

    def run(*args, **kwargs):
        by_value = _by_value(kernel)
        device = driver.active.get_current_device()
        try:
            named = tuple((n, v) if n in by_value else (n, _arg_key(v)) for n, v in kwargs.items())
            key = (id(kernel), device, tuple(map(_arg_key, args)), named, knobs.runtime.debug,
                   knobs.compilation.instrumentation_mode)
            entry = _COMPILED.get(key, False)
        except (_Unkeyed, TypeError):  # TypeError: an unhashable keyword value
            return kernel[grid](*args, **kwargs)
        if entry and entry[0] is kernel and _globals_unchanged(kernel):
            _, compiled, tail = entry
            g = tuple(grid) + (1,) * (3 - len(grid))
            compiled.run(*g, driver.active.get_current_stream(device), compiled.function, compiled.packed_metadata,
                         None, None, None, *args, *[kwargs[v] if by_name else v for by_name, v in tail])
            return compiled
        compiled = kernel[grid](*args, **kwargs)
        if entry is False or (entry and entry[0] is not kernel):  # new, or another kernel's old id
            _COMPILED[key] = (None if compiled is None else
                              (kernel, compiled, _bind_tail(kernel, device, args, kwargs, by_value)))
        return compiled

    return run
