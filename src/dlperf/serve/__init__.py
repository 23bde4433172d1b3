"""Serve a workload or an optimized artifact over KServe v2 / Open Inference Protocol, with dynamic batching.

Entry points: `dlperf.serve.service.ServeConfig`, `dlperf.serve.server.serve()` (blocking, with graceful
shutdown) and `start_in_thread()` (tests, benchmarks); `dlperf.serve.metrics.parse_variant_metrics()`.
"""
