"""`dlperf serve --ray ...` flags become RayServeOptions; bad combinations are ConfigErrors before Ray starts."""

from __future__ import annotations

import argparse
import sys

import pytest

from dlperf.cli import serve
from dlperf.cli.main import main
from dlperf.errors import ConfigError, MissingDependency, ServingError
from dlperf.ray.serve import (
    RayServeOptions,
    check_cpus,
    check_reachable,
    deployment_options,
    max_ongoing_requests,
    parse_autoscale,
)
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
    assert serve.ray_options_from_args(_args("--ray", "--deploy-timeout-s", "90")).deploy_timeout_s == 90


@pytest.mark.parametrize(("argv", "message"), [
    (("--replicas", "2"), "--replicas needs --ray"),
    (("--autoscale", "1:2"), "--autoscale needs --ray"),
    (("--ray-address", "auto"), "--ray-address needs --ray"),
    (("--deploy-timeout-s", "60"), "--deploy-timeout-s needs --ray"),
    (("--ray", "--deploy-timeout-s", "0"), "--deploy-timeout-s must be > 0, got 0"),
    (("--replicas", "2", "--ray-address", "auto"), "--replicas and --ray-address need --ray"),
    (("--ray", "--replicas", "2", "--autoscale", "1:4"), "either --replicas N .* or --autoscale MIN:MAX"),
    (("--ray", "--replicas", "0"), "--replicas must be >= 1, got 0"),
    (("--ray", "--autoscale", "4:1"), "--autoscale 4:1: give MIN:MAX"),
    (("--ray", "--autoscale", "0:0"), "--autoscale 0:0: give MIN:MAX"),
    (("--ray", "--autoscale", "3"), "--autoscale '3' is not MIN:MAX"),
    (("--ray", "--autoscale", "a:b"), "--autoscale 'a:b' is not MIN:MAX"),
    (("--ray", "--allow-client-shm"), "--allow-client-shm does not go with --ray"),
    (("--ray", "--grpc-port", "8001"), "--grpc-port does not go with --ray"),
    (("--ray", "--device", "cuda:1"), "--device cuda:1 does not go with --ray: Ray gives each replica a GPU"),
])
def test_bad_combinations(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        serve.ray_options_from_args(_args(*argv))


@pytest.mark.parametrize(("argv", "message"), [
    (("--replicas", "2"), "--replicas needs --ray"),
    (("--ray", "--port", "0"), "--port 0 is not supported with --ray"),
    # both went to ray.init, which said, seconds later, to unset a RAY_ADDRESS nobody had set
    (("--ray", "--ray-address", "http://127.0.0.1:8265"), "--ray-address http://127.0.0.1:8265: http:// is a URL "
     "(Ray's dashboard and jobs API are http://HOST:8265), not a cluster's address"),
    (("--ray", "--ray-address", "myhead"), "--ray-address myhead: no port: give HOST:PORT"),
])
def test_the_command_refuses_before_loading_anything(argv: tuple[str, ...], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "zoo:mlp", *argv]) == ConfigError.exit_code
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "loading" not in err and "deploying" not in err


def test_without_ray_the_command_gives_the_install_hint_before_any_progress(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It printed "deploying on Ray Serve (1 replica, ...) ..." and only then that Ray is not installed."""
    monkeypatch.setitem(sys.modules, "ray", None)  # what an import of a missing package meets
    assert main(["serve", "zoo:mlp", "--ray"]) == MissingDependency.exit_code
    err = capsys.readouterr().err
    assert "ray is not installed: install it with `pip install 'dlperf[ray]'`" in err
    assert "deploying" not in err and "loading" not in err


def test_autoscale_bounds_and_proxy_location_are_checked_where_the_options_are_made() -> None:
    assert RayServeOptions(autoscale=(2, 2)).autoscale == (2, 2)  # a fixed count, autoscaled: MIN may equal MAX
    assert RayServeOptions(autoscale=(0, 1)).autoscale == (0, 1)
    with pytest.raises(ConfigError, match="--autoscale -1:2: give MIN:MAX with 0 <= MIN"):
        RayServeOptions(autoscale=(-1, 2))
    # Ray Serve's third location, Disabled, runs no proxy: the deployment would wait for one until its deadline
    with pytest.raises(ConfigError, match="unknown proxy location 'Disabled': use HeadOnly or EveryNode"):
        RayServeOptions(proxy_location="Disabled")


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
    # a replica on a GPU asks Ray for one (Ray hides every GPU from an actor that asks for none)
    for device in ("cuda", "cuda:0"):  # cuda:0 is what the replica sees of the GPU Ray gives it
        on_gpu = deployment_options(ServeConfig(model="zoo:mlp", threads=3, device=device), RayServeOptions(replicas=2))
        assert on_gpu["ray_actor_options"] == {"num_cpus": 3.0, "num_gpus": 1.0}
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


@pytest.mark.parametrize(("threads", "options", "cpus", "message"), [
    (None, RayServeOptions(replicas=3), 2.0,
     "3 replicas x 1 CPU each (--threads) need 3 CPUs; the local Ray instance has 2 (this machine's): give "
     "--replicas 2 or fewer, or deploy"),
    (2, RayServeOptions(replicas=2), 3.0, "2 replicas x 2 CPUs each (--threads) need 4 CPUs; the local Ray instance "
     "has 3 (this machine's): give --replicas 1 or fewer, or fewer --threads, or deploy"),
    (8, RayServeOptions(replicas=1), 2.0, "1 replica x 8 CPUs each (--threads) need 8 CPUs; the local Ray instance has "
     "2 (this machine's): give --threads 2 or fewer, or deploy"),
    (None, RayServeOptions(autoscale=(3, 6)), 2.0, "give --autoscale with MIN 2 or fewer"),
    # MIN 0 still starts one replica (Ray Serve's initial_replicas), which must fit
    (8, RayServeOptions(autoscale=(0, 2)), 2.0, "1 replica x 8 CPUs each (--threads) need 8 CPUs; the local Ray "
     "instance has 2 (this machine's): give --threads 2 or fewer"),
])
def test_replicas_that_do_not_fit_a_local_instance_are_refused(threads: int | None, options: RayServeOptions,
                                                               cpus: float, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_cpus(ServeConfig(model="zoo:mlp", threads=threads), options, cpus, local=True)
    assert message in str(caught.value)


def test_replicas_that_fit_or_a_cluster_that_may_grow_are_not_refused() -> None:
    config = ServeConfig(model="zoo:mlp")
    assert check_cpus(config, RayServeOptions(replicas=2), 2.0, local=True) is None
    assert check_cpus(config, RayServeOptions(autoscale=(0, 2)), 2.0, local=True) is None
    assert check_cpus(config, RayServeOptions(autoscale=(0, 8)), 2.0, local=False) is None  # a cluster may grow
    warning = check_cpus(config, RayServeOptions(replicas=3), 2.0, local=False)
    assert warning is not None and "need 3 CPUs; the Ray cluster has 2 now" in warning
    assert "--deploy-timeout-s" in warning


def test_an_address_nothing_answers_is_refused_at_once() -> None:
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ServingError, match=f"cannot reach Ray at 127.0.0.1:{port}: Connection refused; give the "
                                           "head node's address"):
        check_reachable(f"127.0.0.1:{port}")
    for left_to_ray in ("auto", "local", "ray://10.0.0.1:10001"):
        check_reachable(left_to_ray)  # no check of its own


def test_autoscaling_past_a_local_instances_cpus_is_started_with_a_warning() -> None:
    """A local instance never gets more CPUs: replicas Ray Serve adds past them waited for one forever, silently."""
    warning = check_cpus(ServeConfig(model="zoo:mlp"), RayServeOptions(autoscale=(0, 8)), 2.0, local=True)
    assert warning is not None  # it starts with one replica, which fits: not refused
    assert warning.startswith("--autoscale 0:8: the local Ray instance's 2 CPUs hold 2 replicas of 1 CPU (--threads)")
    assert "give --autoscale 0:2, or deploy to a larger cluster with --ray-address" in warning
    warning = check_cpus(ServeConfig(model="zoo:mlp", threads=2), RayServeOptions(autoscale=(1, 3)), 5.0, local=True)
    assert warning is not None and "hold 2 replicas of 2 CPUs" in warning and "give --autoscale 1:2," in warning


def test_a_proxy_killed_before_it_started_gets_a_hint_other_actor_deaths_do_not() -> None:
    """Beside two busy loops on 2 CPUs, Ray Serve's controller killed its proxy before it started, and the deployment
    error was Ray's ActorDiedError alone."""
    from ray.exceptions import ActorDiedError, ActorDiedErrorContext

    from dlperf.ray.serve import _deploy_hint

    def died(class_name: str) -> ActorDiedError:
        return ActorDiedError(ActorDiedErrorContext(class_name=class_name, actor_id=bytes(16), never_started=True,
                                                    error_message="The actor was killed by `ray.kill`."))

    assert "class_name: ProxyActor" in str(died("ProxyActor"))  # the text the hint looks for, as Ray writes it
    assert _deploy_hint(died("ProxyActor")).startswith("; hint: Ray Serve's HTTP proxy did not come up")
    assert _deploy_hint(died("ServeReplica:dlperf:dlperf")) == ""
    assert _deploy_hint(RuntimeError("deploying application dlperf failed")) == ""
