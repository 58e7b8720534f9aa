import sys

from mamba3_perf.cli import main

sys.exit(main())
