"""The bwd_bwd ladder: importing this package registers every stage, in ladder order."""
from mamba3_perf.kernels.bwd_bwd import stage0  # noqa: F401
