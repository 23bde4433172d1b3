"""dlperf.report."""
