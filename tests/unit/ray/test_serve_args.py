"""`dlperf serve --ray ...` flags become RayServeOptions; bad combinations are ConfigErrors before Ray starts."""

from __future__ import annotations

import argparse

import pytest

from dlperf.cli import serve
from dlperf.cli.main import main
from dlperf.errors import ConfigError
from dlperf.ray.serve import RayServeOptions, deployment_options, max_ongoing_requests, parse_autoscale
from dlperf.serve.batcher import LevelPolicy
from dlperf.serve.service import ServeConfig

pytestmark = pytest.mark.unit


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return parser.parse_args(["zoo:mlp", *argv])


def test_without_ray_there_are_no_ray_options() -> None:
    assert serve.ray_options_from_args(_args()) is None


def test_ray_defaults_to_one_replica_on_a_new_local_instance() -> None:
    assert serve.ray_options_from_args(_args("--ray")) == RayServeOptions(replicas=1, autoscale=None, address=None)


def test_ray_values() -> None:
    options = serve.ray_options_from_args(_args("--ray", "--replicas", "3", "--ray-address", "10.0.0.5:6379"))
    assert (options.replicas, options.autoscale, options.address) == (3, None, "10.0.0.5:6379")
    options = serve.ray_options_from_args(_args("--ray", "--autoscale", "0:4", "--ray-address", "auto"))
    assert (options.autoscale, options.address) == ((0, 4), "auto")


@pytest.mark.parametrize(("argv", "message"), [
    (("--replicas", "2"), "--replicas needs --ray"),
    (("--autoscale", "1:2"), "--autoscale needs --ray"),
    (("--ray-address", "auto"), "--ray-address needs --ray"),
    (("--replicas", "2", "--ray-address", "auto"), "--replicas and --ray-address need --ray"),
    (("--ray", "--replicas", "2", "--autoscale", "1:4"), "either --replicas N .* or --autoscale MIN:MAX"),
    (("--ray", "--replicas", "0"), "--replicas must be >= 1, got 0"),
    (("--ray", "--autoscale", "4:1"), "--autoscale 4:1: give MIN:MAX"),
    (("--ray", "--autoscale", "0:0"), "--autoscale 0:0: give MIN:MAX"),
    (("--ray", "--autoscale", "3"), "--autoscale '3' is not MIN:MAX"),
    (("--ray", "--autoscale", "a:b"), "--autoscale 'a:b' is not MIN:MAX"),
    (("--ray", "--allow-client-shm"), "--allow-client-shm does not go with --ray"),
    (("--ray", "--grpc-port", "8001"), "--grpc-port does not go with --ray"),
])
def test_bad_combinations(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        serve.ray_options_from_args(_args(*argv))


@pytest.mark.parametrize(("argv", "message"), [
    (("--replicas", "2"), "--replicas needs --ray"),
    (("--ray", "--port", "0"), "--port 0 is not supported with --ray"),
])
def test_the_command_refuses_before_loading_anything(argv: tuple[str, ...], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "zoo:mlp", *argv]) == ConfigError.exit_code
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "loading" not in err and "deploying" not in err


def test_parse_autoscale() -> None:
    assert parse_autoscale("1:4") == (1, 4)
    with pytest.raises(ConfigError, match=r"e\.g\. 1:4"):
        parse_autoscale("1-4")


def test_deployment_options_carry_the_serving_settings() -> None:
    config = ServeConfig(model="zoo:mlp", max_batch_size=8, instances=2, threads=3, exit_timeout_s=12.0)
    fixed = deployment_options(config, RayServeOptions(replicas=4))
    # a replica must admit enough requests to fill a batch on each instance, plus as many queued behind them
    assert max_ongoing_requests(config) == 8 * 2 + 8 * 2
    assert fixed["num_replicas"] == 4 and "autoscaling_config" not in fixed
    assert fixed["max_ongoing_requests"] == 32
    leveled = ServeConfig(model="zoo:mlp", max_batch_size=8, instances=2, max_queue_size=4, priority_levels=3,
                          priority_queue_policy=(LevelPolicy(1, max_queue_size=2),))
    assert max_ongoing_requests(leveled) == 8 * 2 + (2 + 4 + 4)  # every level's queue fits
    assert fixed["ray_actor_options"] == {"num_cpus": 3.0}
    assert fixed["graceful_shutdown_timeout_s"] == 12.0
    scaled = deployment_options(config, RayServeOptions(autoscale=(0, 5)))
    assert "num_replicas" not in scaled
    assert scaled["autoscaling_config"] == {"min_replicas": 0, "max_replicas": 5, "initial_replicas": 1,
                                            "target_ongoing_requests": 16}


def test_a_bounded_queue_bounds_what_a_replica_admits() -> None:
    config = ServeConfig(model="zoo:mlp", max_batch_size=0, max_queue_size=5)
    assert max_ongoing_requests(config) == 1 + 5
    # and what Ray's proxy holds for the replicas (it held them without limit); unbounded stays unbounded
    assert deployment_options(config, RayServeOptions())["max_queued_requests"] == 5
    assert "max_queued_requests" not in deployment_options(ServeConfig(model="zoo:mlp"), RayServeOptions())
    assert deployment_options(config, RayServeOptions())["ray_actor_options"] == {"num_cpus": 1.0}
