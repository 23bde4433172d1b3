"""Load generation against an OIP server: concurrency and request-rate modes, stability windows, peak search.

Entry points: `dlperf.loadgen.generator.oip_target()`, `run_load()`, `run_level()`, `find_peak()`.
"""
