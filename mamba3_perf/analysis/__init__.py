"""Pure DataFrame analyses: ladder speedups, run comparison, limits and memory models, breakdowns.

No plotting and no I/O here (the recorded GPU baseline loader in :mod:`.ladder` excepted).
"""
