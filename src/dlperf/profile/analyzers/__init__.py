"""dlperf.profile.analyzers."""
