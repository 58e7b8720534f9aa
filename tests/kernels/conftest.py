"""Shared by the kernel tests."""
import pytest

from mamba3_perf.kernels import api, get_case, make_inputs


@pytest.fixture
def case_meta():
    """The launch meta (api.validate) of a case's generated inputs, by case or case id: what
    the stages' shape rules read."""
    def meta(case):
        case = get_case(case) if isinstance(case, str) else case
        return api.validate(**make_inputs(case), chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor)
    return meta
