"""dlperf.optimize."""
