"""The machine's ceilings: GEMM FLOP/s per dtype and memory bandwidth, measured once and cached per machine.

    from dlperf.calibrate import get_ceilings
    c = get_ceilings("cpu")            # cached, or measured now (a few seconds)
    c.gemm_flops["fp32"], c.memory_bandwidth_bytes_s
"""

from dlperf.calibrate.ceilings import (
    CACHE_ENV_VAR,
    DTYPES,
    Ceilings,
    cache_dir,
    cache_path,
    get_ceilings,
    lookup_or_measure,
    machine_key,
)

__all__ = ["CACHE_ENV_VAR", "DTYPES", "Ceilings", "cache_dir", "cache_path", "get_ceilings", "lookup_or_measure",
           "machine_key"]
