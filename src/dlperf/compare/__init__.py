"""dlperf.compare."""
