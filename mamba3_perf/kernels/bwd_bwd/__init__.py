"""The bwd_bwd ladder: importing this package registers every stage, in ladder order."""
from mamba3_perf.kernels.bwd_bwd import stage0  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage1_pre  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage2_aux  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage3_rankfold  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage4_nblock  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage5_rankloop  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import prod  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage6_statepass  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage7_streamaux  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage8_mixprec  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage9_termsblock  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage10_fewscratch  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage11_steptrig  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage12_pipeaux  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage13_diagpost  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage14_latesums  # noqa: F401
from mamba3_perf.kernels.bwd_bwd import stage15_passwave  # noqa: F401
