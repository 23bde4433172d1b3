"""dlperf.calibrate."""
