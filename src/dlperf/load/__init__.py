"""dlperf.load."""
