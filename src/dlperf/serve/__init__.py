"""dlperf.serve."""
