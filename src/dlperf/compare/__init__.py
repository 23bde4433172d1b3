"""Compare and track performance: interleaved A/B of settings (`ab`), comparison of stored runs (`runs`),
named baselines and the regression gate (`baselines`, `gate`, `check`), live A/B of served variants
(`live`), and the statistical tests they share (`stats`)."""
