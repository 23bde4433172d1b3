"""dlperf.profile: capture a step under torch.profiler, analyse the trace, diagnose the bottleneck, verify fixes.

    from dlperf.profile.session import ProfileConfig, profile_workload
    report = profile_workload(workload, ProfileConfig(verify=True))
    report.diagnosis.verdict, report.diagnosis.findings, report.verified

capture.py (trace) -> analyzers/ (one pure analysis each) -> diagnose.py (ranked findings) -> verify.py
(interleaved A/B of fixes.py's fixes); session.py runs them in order. See docs/profile.md.
"""
