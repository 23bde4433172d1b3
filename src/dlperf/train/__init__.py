"""dlperf.train."""
