"""Environment capture: the fields a result is compared on."""

from __future__ import annotations

import os

import pytest

from dlperf.measure.env import Environment, capture_environment, environment_differences

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def env() -> Environment:
    return capture_environment()


def test_versions_and_threads(env: Environment) -> None:
    import platform

    import torch

    import dlperf

    assert env.torch_version == torch.__version__
    assert env.python_version == platform.python_version()
    assert env.dlperf_version == dlperf.__version__
    assert env.torch_threads == torch.get_num_threads()
    assert env.torch_interop_threads == torch.get_num_interop_threads()


def test_hardware_fields(env: Environment) -> None:
    import torch

    assert env.logical_cores == (os.cpu_count() or 1)
    assert env.cpu_model
    assert env.total_memory_bytes > 2**28
    assert env.machine
    assert set(env.cpu_flags) <= {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                  "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"}
    assert (env.gpu_count > 0) == torch.cuda.is_available()
    assert env.packages.get("numpy")


def test_round_trip_ignores_unknown_keys(env: Environment) -> None:
    data = env.to_dict() | {"added_in_a_later_version": 1}
    back = Environment.from_dict(data)
    assert back == env
    assert back.hardware_key == f"{env.cpu_model}|{env.logical_cores}|{env.gpu_name or '-'}"


def test_environment_differences(env: Environment) -> None:
    a = env.to_dict()
    b = a | {"torch_version": "9.9", "torch_threads": 64}
    diffs = environment_differences(a, b)
    assert diffs == [f"torch_version: {a['torch_version']} vs 9.9", f"torch_threads: {a['torch_threads']} vs 64"]
    assert environment_differences(a, dict(a)) == []


def test_gpu_index_of_a_device_string() -> None:
    from dlperf.measure.env import gpu_index

    assert gpu_index("cuda:3") == 3
    assert gpu_index("cuda:0") == 0
