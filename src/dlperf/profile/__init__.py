"""dlperf.profile."""
