"""Trace tests use a fixed stage registry, so they do not depend on the stage modules in progress."""
import pytest

from mamba3_perf.kernels.registry import Tag

PROJECT_TAGS = {
    "bwd_bwd_fused_kernel": (Tag.FUSED, "stage0"),
    "bwd_bwd_pre_kernel": (Tag.PRE, "prod"),
    "bwd_bwd_aux_kernel": (Tag.AUX, "prod"),
    "bwd_bwd_aux_rankfold_kernel": (Tag.AUX, "rankfold"),
    "bwd_bwd_scan_kernel": (Tag.SCAN, "prod"),
    "bwd_bwd_scan_full_kernel": (Tag.SCAN, "scanfull"),
    "bwd_bwd_scan_nblock_kernel": (Tag.SCAN, "nblock"),
    "bwd_bwd_post_kernel": (Tag.POST, "prod"),
    "bwd_bwd_state_pass_kernel": (Tag.SCAN, "stage6_statepass"),
    "bwd_bwd_state_terms_kernel": (Tag.POST, "stage6_statepass"),
    "bwd_bwd_chunk_sum_kernel": (Tag.POST, "stage6_statepass"),
}


@pytest.fixture(autouse=True)
def fixed_registry(monkeypatch):
    monkeypatch.setattr("mamba3_perf.traces.attribution.kernel_tags", lambda: dict(PROJECT_TAGS))
