from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rich.console import Console

from dlperf.cli.main import main
from dlperf.errors import ConfigError, TrainError
from dlperf.report.train_view import ddp_view
from dlperf.store import Store
from dlperf.train.ddp import DdpConfig, DdpResult, RankStats, expected_buckets, findings_for, launch, rank_error
from dlperf.train.knobs import Candidate, TuneContext
from dlperf.train.loop import StepConfig

pytestmark = pytest.mark.unit


def _result(step_1: float, step_n: float, nosync_n: float, allreduce: float, buckets: int = 3) -> DdpResult:
    single = RankStats(1, 32, step_1, step_1, 0.0, 4 * 2**20, buckets)
    multi = RankStats(2, 32, step_n, nosync_n, allreduce, 4 * 2**20, buckets)
    return DdpResult("w", "gloo", 1, 25.0, single, multi)


def test_scaling_efficiency_communication_share_and_overlap() -> None:
    r = _result(step_1=0.010, step_n=0.0125, nosync_n=0.010, allreduce=0.005)
    assert r.single.samples_per_s == pytest.approx(3200)
    assert r.multi.samples_per_s == pytest.approx(2 * 32 / 0.0125)
    assert r.scaling_efficiency == pytest.approx(0.8)
    assert r.exposed_comm_s == pytest.approx(0.0025)
    assert r.comm_share == pytest.approx(0.2)
    assert r.overlap == pytest.approx(0.5)
    d = r.to_dict()
    assert d["nproc"] == 2 and d["scaling_efficiency"] == pytest.approx(0.8)


def test_findings_name_a_single_bucket_and_ineffective_overlap() -> None:
    r = _result(step_1=0.010, step_n=0.020, nosync_n=0.010, allreduce=0.025, buckets=1)
    assert r.overlap == 0.0  # one bucket: nothing can overlap, though 60% of the standalone time looks hidden
    found = " ".join(findings_for(r, cpus=8, device="cpu"))
    assert "one bucket" in found
    assert "not effective" in found
    assert "communication-bound" in found
    crowded = " ".join(findings_for(r, cpus=1, device="cpu"))
    assert "compete for cores" in crowded


def test_a_lower_bucket_cap_is_advised_only_for_gradients_large_enough_to_split() -> None:
    """0.07 MiB of gradients in one bucket were told to lower bucket_cap_mb: more buckets only add all-reduce calls,
    each paying the latency that is the cost there (DDP itself splits nothing under its 1 MiB first bucket)."""
    tiny = _result(step_1=0.001, step_n=0.007, nosync_n=0.001, allreduce=0.0005, buckets=1)
    tiny.multi.gradient_bytes = int(0.07 * 2**20)
    found = findings_for(tiny, cpus=8, device="cpu")
    assert not any("lower bucket_cap_mb" in f for f in found)
    assert ("all 0.07 MiB of gradients fit one bucket, so nothing overlaps, but they are too few for buckets to "
            "matter: DDP splits nothing under 1 MiB off, as each all-reduce call costs a fixed latency that smaller "
            "buckets would pay once each (the all-reduce alone takes 0.5 ms for them); what costs here is that "
            "latency") in " ".join(found)
    large = _result(step_1=0.010, step_n=0.020, nosync_n=0.010, allreduce=0.025, buckets=1)  # 4 MiB in one bucket
    assert any(f.endswith("lower bucket_cap_mb to overlap") for f in findings_for(large, cpus=8, device="cpu"))


@pytest.mark.parametrize(("nbytes", "cap", "expected"),
                         [(2**19, 25, 1), (2**20, 25, 1), (2**20 + 1, 25, 2), (51 * 2**20, 25, 3)])
def test_expected_buckets(nbytes: int, cap: float, expected: int) -> None:
    assert expected_buckets(nbytes, cap) == expected


def test_ddp_config_validates() -> None:
    with pytest.raises(ConfigError, match="backend"):
        DdpConfig(nproc=2, backend="mpi")
    assert DdpConfig(nproc=2).backend_for("cpu") == "gloo"
    assert DdpConfig(nproc=2).backend_for("cuda:0") == "nccl"


def test_a_named_gpu_with_nproc_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank r runs on cuda:r: --device cuda:1 --nproc 2 was measured on cuda:0 and cuda:1 without a word."""
    from dlperf.train.ddp import run_ddp

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    with pytest.raises(ConfigError, match=r"--device cuda:1 with --nproc: rank r runs on cuda:r .* CUDA_VISIBLE"):
        run_ddp("zoo:mlp", StepConfig(batch_size=8, device="cuda:1"), DdpConfig(nproc=2))


def test_ddp_view_renders_the_numbers() -> None:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view(_result(0.010, 0.0125, 0.010, 0.005).to_dict()))
    text = console.export_text()
    assert "scaling efficiency 80%" in text
    assert "20% of the step" in text and "50% of the all-reduce is hidden" in text


def test_ddp_view_gives_tokens_per_s_beside_samples_per_s_for_token_ids() -> None:
    """--nproc printed samples/s only, where a single-process run and a tuning give tokens/s too."""
    from dlperf.report.html_kinds import _ddp_view

    single = RankStats(1, 32, 0.010, 0.010, 0.0, 4 * 2**20, 3, tokens_per_step=32 * 4.5)
    multi = RankStats(2, 32, 0.0125, 0.010, 0.005, 4 * 2**20, 3, tokens_per_step=64 * 4.5)
    d = DdpResult("w", "gloo", 1, 25.0, single, multi).to_dict()
    assert d["single_tokens_per_s"] == pytest.approx(14400) and d["tokens_per_s"] == pytest.approx(23040)
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view(d))
    text = console.export_text()
    assert "1 process   3,200 samples/s, 14,400 tokens/s (step 10.00 ms)" in text, text
    assert "2 processes 5,120 samples/s, 23,040 tokens/s (step 12.50 ms)" in text, text
    assert ">tokens/s</th>" in _ddp_view(d) and ">23,040<" in _ddp_view(d)
    plain = _result(0.010, 0.0125, 0.010, 0.005).to_dict()
    assert plain["tokens_per_s"] is None and "tokens/s" not in _ddp_view(plain)


def test_train_takes_the_memory_budget_as_profile_does(capsys: pytest.CaptureFixture[str]) -> None:
    """Two parsers of --memory-budget (train's took '1000' as 1000 bytes without a word, and no 'T'): now one."""
    assert main(["train", "zoo:mlp", "--tune", "--memory-budget", "10"]) == ConfigError.exit_code
    assert "--memory-budget 10: a number without a unit is bytes" in capsys.readouterr().err


def test_one_process_reports_no_scaling_and_no_communication() -> None:
    """With one rank there is nothing to scale or all-reduce: the two medians' difference is noise."""
    step = RankStats(1, 64, 0.0100, 0.0091, 0.0, 4 * 2**20, 1)
    r = DdpResult("w", "gloo", 1, 25.0, step, step)
    assert r.scaling_efficiency is None
    assert r.exposed_comm_s == 0.0 and r.comm_share == 0.0
    assert r.overlap is None
    assert findings_for(r, cpus=8, device="cpu") == []  # its one bucket too: nothing to overlap with
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view(r.to_dict()))
    text = console.export_text()
    assert "1 processes" not in text and "scaling efficiency" not in text and "exposed" not in text
    assert "pass --nproc 2 or more" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["--steps", "0"], "--steps must be >= 1"),
    (["--tune", "--knobs", "warp"], "unknown knob"),
    (["--tune", "--parity-steps", "1"], "--parity-steps must be >= 2"),
    # options another mode reads are refused, not silently ignored
    (["--knobs", "threads"], "--knobs only applies with --tune: add --tune"),
    (["--margin", "5%", "--ab-blocks", "8"], "--margin, --ab-blocks only apply with --tune"),
    (["--timeout", "60"], "--timeout only applies with --nproc"),
    (["--tune", "--nproc", "2"], "--tune and --nproc do not combine"),
    (["--nproc", "2", "--steps", "1"], "--steps (with --nproc) must be >= 2"),
    (["--nproc", "2", "--timeout", "0"], "--timeout must be a positive number"),
    # the message names the option, not the library field behind it
    (["--tune", "--memory-budget", "0"], "--memory-budget must be at least one byte"),
    (["--tune", "--margin", "100%"], "--margin must be at least 0% and below 100%"),
    (["--tune", "--parity-tolerance=-5%"], "--parity-tolerance must be >= 0"),
    (["--tune", "--parity-tolerance", "nan"], "--parity-tolerance must be >= 0"),
    (["--tune", "--margin", "nan"], "--margin must be at least 0% and below 100%"),
    (["--tune", "--knobs", "threads", "--skip", "threads"], "leaves no knob to try"),
    # an empty list (an unset variable in a script) tried every knob
    (["--tune", "--knobs", ""], "--knobs '' names no knob: give some of threads"),
    (["--tune", "--knobs", " , "], "--knobs ' , ' names no knob"),
])
def test_cli_errors_exit_2_with_the_fix(argv: list[str], message: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "zoo:mlp", "--store", str(tmp_path / "s.db"), "--no-mfu", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_missing_gpu_is_refused_before_a_run_is_recorded(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.db"
    assert main(["train", "zoo:mlp", "--device", "cuda:1", "--no-mfu", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "--device cuda:1 asked for, but no CUDA device is available (torch " in err
    assert "sees none): use --device cpu" in err
    assert Store(store, create=True).list() == []  # a bad option is not a failed training run


BROKEN_STEP = """
import torch
from torch import nn

import dlperf


def loader(batch_size, **kwargs):
    return [(torch.randn(batch_size, 4), torch.zeros(batch_size, dtype=torch.long))]


workload = dlperf.Workload(
    name="broken", make_model=lambda: nn.Linear(4, 2), make_inputs=lambda b: (torch.randn(b, 4),),
    train=dlperf.TrainSpec(make_loader=loader, loss_fn=lambda out, y: out.sum(dim=1),
                           make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=8),
)
"""


@pytest.mark.parametrize("mode", [[], ["--tune", "--knobs", "threads"]])
def test_a_broken_training_step_is_an_error_with_the_fix_not_a_traceback(
        mode: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.py"
    path.write_text(BROKEN_STEP)
    code = main(["train", str(path), "--steps", "2", "--no-mfu", "--store", str(tmp_path / "s.db"), *mode])
    err = capsys.readouterr().err
    assert code == 2
    assert "workload 'broken': its loss_fn returned a tensor of shape [8], not a scalar tensor" in err
    assert "Traceback" not in err


class _Knob:
    sweep = False

    def __init__(self, name: str, change: dict[str, object] | None) -> None:
        self.name = name
        self.change = change

    def skip_reason(self, current: StepConfig, ctx: TuneContext) -> str | None:
        return None

    def candidates(self, current: StepConfig, ctx: TuneContext) -> list[Candidate]:
        if self.change is None:
            raise KeyboardInterrupt  # Ctrl-C while the second knob proposes
        return [Candidate(self.change, "fixed")]


@pytest.mark.slow  # a whole (one-trial) tuning through the CLI: 12-20 s on 2 busy cores
def test_an_interrupted_tuning_keeps_the_trials_it_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    knobs = {"threads": _Knob("threads", {"threads": 1}), "workers": _Knob("workers", None)}
    monkeypatch.setattr("dlperf.train.tune.registry", lambda: knobs)
    store = tmp_path / "s.db"
    code = main(["train", "zoo:mlp", "--tune", "--knobs", "threads,workers", "--parity-steps", "2", "--ab-blocks",
                 "4", "--steps", "2", "--no-mfu", "--store", str(store)])
    assert code == 130
    (run,) = Store(store).list(kind="train")
    assert run.status == "interrupted"
    assert [t["knob"] for t in run.result["trials"]] == ["threads"]
    assert run.result["trials"][0]["change"] == {"threads": 1} and "best" not in run.result
    capsys.readouterr()
    assert main(["runs", "show", run.id, "--store", str(store)]) == 0
    shown = capsys.readouterr().out
    assert "tuning mlp stopped after 1 trial, before the baseline and the best were measured" in shown  # trial(s)
    assert "threads=1" in shown


def test_the_overlap_line_and_the_bucket_finding_give_the_same_gradient_size() -> None:
    single = RankStats(1, 64, 0.010, 0.010, 0.0, 335_000, 1)
    multi = RankStats(2, 64, 0.013, 0.011, 0.003, 335_000, 1)
    result = DdpResult("w", "gloo", 1, 25.0, single, multi)
    result.findings = findings_for(result, cpus=8, device="cpu")
    console = Console(width=300, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view(result.to_dict()))
    text = console.export_text()
    assert "for 0.32 MiB of gradients" in text and "all 0.32 MiB of gradients fit one bucket" in text
    assert "1 gradient bucket of 25.0 MiB" in text  # it said "bucket(s)"


def test_exposed_time_well_above_the_all_reduce_is_not_blamed_on_the_all_reduce_alone() -> None:
    # zoo:digits-cnn on 2 gloo ranks: 2.25 ms more than no-sync, 0.87 ms of all-reduce
    r = _result(step_1=0.00985, step_n=0.01367, nosync_n=0.01142, allreduce=0.000866, buckets=1)
    found = findings_for(r, cpus=8, device="cpu")
    assert ("the DDP step costs 2.25 ms more than the no-sync step, but the all-reduce alone takes 0.866 ms: the "
            "rest is DDP's own work") in " ".join(found)
    close = _result(step_1=0.010, step_n=0.0125, nosync_n=0.010, allreduce=0.002)
    assert not [f for f in findings_for(close, cpus=8, device="cpu") if "DDP's own work" in f]


def test_nproc_beyond_the_cpu_rank_limit_is_refused_before_any_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--nproc 1000` on CPU would start a thousand processes, each importing torch and building the model."""
    from dlperf.measure import env
    from dlperf.train import ddp
    from dlperf.train.loop import StepConfig

    def no_launch(*args: object) -> None:
        raise AssertionError("launched")

    monkeypatch.setattr(ddp, "launch", no_launch)
    monkeypatch.setattr(env, "usable_cores", lambda: 2)
    with pytest.raises(ConfigError, match=r"^--nproc \(on CPU\) 9 is more than 8, the most accepted on this machine"):
        ddp.run_ddp("zoo:mlp", StepConfig(batch_size=8), ddp.DdpConfig(nproc=9))
    monkeypatch.setattr(env, "usable_cores", lambda: 4)
    with pytest.raises(AssertionError, match="launched"):  # 16 ranks on 4 CPUs are allowed (and noted)
        ddp.run_ddp("zoo:mlp", StepConfig(batch_size=8), ddp.DdpConfig(nproc=16))


def test_the_efficiency_splits_into_compute_contention_and_communication() -> None:
    """A 2-rank run with loader workers read 20% efficiency with findings that blamed communication alone (32% of the
    step), where the ranks' compute alone (the no-sync step) took 3.4x the 1-process step: the ranks slowed each
    other down. Same batch per process, so efficiency = (no-sync step on 1 / on N) x what is left."""
    single = RankStats(1, 32, 0.012, 0.010, 0.0, 4 * 2**20, 3)  # DDP's reducer costs even one process 2 ms
    multi = RankStats(2, 32, 0.050, 0.025, 0.005, 4 * 2**20, 3)
    r = DdpResult("w", "gloo", 1, 25.0, single, multi)
    assert r.scaling_efficiency == pytest.approx(0.24)
    compute, comm = r.compute_scaling, r.communication_scaling
    assert compute == pytest.approx(0.4) and comm == pytest.approx(0.6)
    assert compute is not None and comm is not None and compute * comm == pytest.approx(r.scaling_efficiency)
    data = r.to_dict()
    assert data["compute_scaling"] == pytest.approx(0.4) and data["communication_scaling"] == pytest.approx(0.6)
    found = findings_for(r, cpus=8, device="cpu")
    (contention,) = [f for f in found if f.startswith("the ranks slow each other down")]
    assert "(the no-sync step, 25 ms) takes 2.50x what it takes on 1 process (10 ms)" in contention
    assert "more than communication does (40% against 60%)" in contention
    calm = DdpResult("w", "gloo", 1, 25.0, single, RankStats(2, 32, 0.020, 0.0105, 0.005, 4 * 2**20, 3))
    assert not [f for f in findings_for(calm, cpus=8, device="cpu") if "slow each other" in f or "busier" in f]
    # the ranks' compute faster than one process's: the two launches saw different machines (a real run read the
    # ranks' no-sync step 0.813 ms against 1.03 ms on 1 process)
    drifted = DdpResult("w", "gloo", 1, 25.0, RankStats(1, 64, 0.0124, 0.0103, 0.0, 340_008, 1),
                        RankStats(2, 64, 0.0322, 0.00813, 0.0005, 340_008, 1))
    (busier,) = [f for f in findings_for(drifted, cpus=8, device="cpu") if "busier" in f]
    assert busier.startswith("the ranks' compute alone (the no-sync step, 8.13 ms) ran 1.27x as fast as on 1 process "
                             "(10.3 ms)")
    alone = RankStats(1, 32, 0.01, 0.01, 0.0, 1, 1)
    one = DdpResult("w", "gloo", 1, 25.0, alone, alone)
    assert one.compute_scaling is None and one.communication_scaling is None
    console = Console(width=300, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view({**data, "findings": found}))
    text = console.export_text()
    assert "scaling efficiency 24%: compute 40% (the no-sync step, 25.00 ms per rank, against 10.00 ms on 1 " \
           "process) x communication 60%" in text
    # a record from before the split renders as it did
    old = {k: v for k, v in data.items() if k not in ("compute_scaling", "communication_scaling")}
    console = Console(width=300, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view(old))
    assert "scaling efficiency 24%\n" in console.export_text()


def test_loader_workers_count_towards_the_cores_the_ranks_compete_for() -> None:
    r = _result(step_1=0.010, step_n=0.0125, nosync_n=0.010, allreduce=0.005)  # 2 ranks x 1 thread
    assert not [f for f in findings_for(r, cpus=2, device="cpu") if "compete for cores" in f]
    (crowded,) = [f for f in findings_for(r, cpus=2, device="cpu", loader_workers=1) if "compete for cores" in f]
    assert crowded.startswith("2 processes x 1 thread and 1 loader worker on 2 usable CPUs")


def test_ddps_rebuilt_buckets_come_first_and_the_view_gives_their_sizes() -> None:
    from dlperf.train.ddp import _bucket_bytes

    # what DDP's logging data held after three steps of a model with 4 MiB of gradients
    logging = {"bucket_sizes": "4202496", "rebuilt_bucket_sizes": "1050624, 3151872"}
    assert _bucket_bytes(logging) == [1050624, 3151872]
    assert _bucket_bytes({"bucket_sizes": "4202496"}) == [4202496]
    assert _bucket_bytes({}) == []
    single = RankStats(1, 32, 0.010, 0.010, 0.0, 4202496, 2, bucket_bytes=[1050624, 3151872])
    multi = RankStats(2, 32, 0.014, 0.010, 0.002, 4202496, 2, [0.014, 0.013], [1050624, 3151872])
    assert RankStats.from_dict(multi.to_dict()) == multi
    result = DdpResult("w", "gloo", 1, 25.0, single, multi)
    console = Console(width=300, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view(result.to_dict()))
    assert "2 gradient buckets (1.00 + 3.01 MiB; bucket_cap_mb 25) for 4.01 MiB of gradients" in console.export_text()


def test_ddp_config_validates_the_process_count_steps_and_backend() -> None:
    with pytest.raises(ConfigError, match="--nproc must be >= 1, got 0"):
        DdpConfig(nproc=0)
    with pytest.raises(ConfigError, match="at least 2 steps, got 1"):
        DdpConfig(nproc=2, steps=1)
    assert DdpConfig(nproc=1, steps=2, backend="nccl").backend_for("cpu") == "nccl"  # asked for, kept


def test_the_overlap_is_never_below_zero_when_the_exposed_time_exceeds_the_all_reduce() -> None:
    r = _result(step_1=0.010, step_n=0.020, nosync_n=0.010, allreduce=0.004, buckets=3)  # 10 ms exposed, 4 ms alone
    assert r.overlap == 0.0
    assert "bucketing/overlap is not effective: 0% of the all-reduce is hidden" in " ".join(
        findings_for(r, cpus=8, device="cpu"))


def test_the_record_keeps_each_launchs_own_figures() -> None:
    r = _result(step_1=0.010, step_n=0.0125, nosync_n=0.011, allreduce=0.005)
    d = r.to_dict()
    assert d["single_samples_per_s"] == pytest.approx(3200) and d["single_step_s"] == 0.010
    assert d["samples_per_s"] == pytest.approx(2 * 32 / 0.0125) and d["step_s"] == 0.0125
    assert d["nosync_step_s"] == 0.011 and d["allreduce_s"] == 0.005 and d["exposed_comm_s"] == pytest.approx(0.0015)
    assert d["single"] == r.single.to_dict() and d["multi"] == r.multi.to_dict()


@pytest.mark.parametrize(("step_n", "nosync_n", "allreduce"), [
    (0.0105, 0.010, 0.0006),  # 17% of the all-reduce hidden, but it costs 5% of the step: nothing worth saying
    (0.0125, 0.010, 0.0025 / 0.6),  # 40% hidden at 20% of the step: neither effective nor ineffective
])
def test_no_overlap_finding_between_its_thresholds(step_n: float, nosync_n: float, allreduce: float) -> None:
    r = _result(step_1=0.010, step_n=step_n, nosync_n=nosync_n, allreduce=allreduce)
    assert not [f for f in findings_for(r, cpus=8, device="cpu") if "overlap" in f]


def test_a_run_slowed_by_compute_contention_is_not_called_communication_bound() -> None:
    r = _result(step_1=0.010, step_n=0.0145, nosync_n=0.014, allreduce=0.002)  # 69% efficiency, 3% exposed
    found = findings_for(r, cpus=8, device="cpu")
    assert [f for f in found if f.startswith("the ranks slow each other down")]
    assert not [f for f in found if "communication-bound" in f]


def _no_launch(*args: object) -> RankStats:
    raise AssertionError("launched")


def test_a_compiled_configuration_is_refused_before_any_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.train import ddp

    monkeypatch.setattr(ddp, "launch", _no_launch)
    with pytest.raises(ConfigError, match=r"--nproc measures eager DDP; drop torch\.compile"):
        ddp.run_ddp("zoo:mlp", StepConfig(batch_size=8, compile=True), DdpConfig(nproc=2))


def test_as_many_gpus_as_ranks_are_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.train import ddp

    monkeypatch.setattr(ddp, "launch", _no_launch)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(AssertionError, match="launched"):
        ddp.run_ddp("zoo:mlp", StepConfig(batch_size=8, device="cuda"), DdpConfig(nproc=2))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match="--nproc 2 on CUDA needs 2 GPUs; 1 are visible"):
        ddp.run_ddp("zoo:mlp", StepConfig(batch_size=8, device="cuda"), DdpConfig(nproc=2))


def test_both_launches_run_at_the_same_threads_and_the_findings_count_the_loader_workers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.train import ddp

    launched: list[tuple[int, int]] = []

    def fake_launch(workload_spec: str, config: StepConfig, ddp_config: DdpConfig, nproc: int,
                    threads: int) -> RankStats:
        launched.append((nproc, threads))
        return RankStats(nproc, 32, 0.010 + 0.002 * (nproc - 1), 0.010, 0.001 * (nproc - 1), 4 * 2**20, 3)

    monkeypatch.setattr(ddp, "launch", fake_launch)
    monkeypatch.setattr(ddp, "usable_cores", lambda: 4)
    labels: list[str] = []
    partials: list[dict[str, object]] = []
    result = ddp.run_ddp("zoo:mlp", StepConfig(batch_size=32, num_workers=1), DdpConfig(nproc=2),
                         labels.append, partials.append)
    assert launched == [(1, 2), (2, 2)]  # usable CPUs // nproc, the same for both
    assert labels == ["1 process", "2 processes"]
    (partial,) = partials
    assert partial["single_samples_per_s"] == pytest.approx(3200) and partial["threads_per_process"] == 2
    assert result.threads_per_process == 2 and result.multi.world_size == 2
    (crowded,) = [f for f in result.findings if "compete for cores" in f]  # 2 x (2 threads + 1 worker) on 4 CPUs
    assert crowded.startswith("2 processes x 2 threads and 1 loader worker on 4 usable CPUs")


def _fake_torchrun(monkeypatch: pytest.MonkeyPatch, returncode: int = 0, stderr: str = "",
                   write: bool = True) -> dict[str, object]:
    """run_process_group replaced: records what it was given and writes the ranks' result file, as rank 0 would."""
    from dlperf.train import ddp

    seen: dict[str, object] = {}

    def run(command: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str, str]:
        seen.update(command=command, env=env, timeout_s=timeout_s)
        if write:
            out = Path(command[command.index("--out") + 1])
            out.write_text(json.dumps(RankStats(2, 16, 0.02, 0.015, 0.004, 1000, 1, [0.02, 0.019]).to_dict()))
        return returncode, "", stderr

    monkeypatch.setattr(ddp, "run_process_group", run)
    return seen


def test_launch_gives_the_ranks_the_measurement_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_torchrun(monkeypatch)
    config = StepConfig(batch_size=8, accumulation_steps=2)
    stats = launch("zoo:mlp", config, DdpConfig(nproc=2, steps=7, warmup_steps=2, bucket_cap_mb=5.0, timeout_s=90), 2,
                   threads=3)
    assert stats == RankStats(2, 16, 0.02, 0.015, 0.004, 1000, 1, [0.02, 0.019])
    command = seen["command"]
    assert isinstance(command, list)

    def option(name: str) -> str:
        return str(command[command.index(name) + 1])

    assert option("--nproc_per_node") == "2" and option("-m") == "torch.distributed.run"
    assert command[command.index("--nproc_per_node") + 2:][:2] == ["-m", "dlperf.train.ddp"]
    assert option("--workload") == "zoo:mlp" and StepConfig.from_dict(json.loads(option("--config"))) == config
    assert (option("--steps"), option("--warmup"), option("--threads")) == ("7", "2", "3")
    assert (option("--backend"), option("--bucket-cap-mb")) == ("gloo", "5.0")
    env = seen["env"]
    assert isinstance(env, dict) and env["OMP_NUM_THREADS"] == "3"
    assert seen["timeout_s"] == 90


RANKS_FAILED = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "ddp.py", line 420, in main
[rank1]:     loop = TrainLoop(load_workload(args.workload), config, seed=0)
[rank1]: RuntimeError: an earlier failure
[rank0]: Traceback (most recent call last):
[rank0]:   File "ddp.py", line 420, in main
[rank0]:     loop = TrainLoop(load_workload(args.workload), config, seed=0)
[rank0]: ValueError: the last failure
[rank0]: on two lines
E0101 12:00:00 torch/distributed/elastic/multiprocessing/api.py: failed (exitcode: 1)
"""


def test_a_failed_launch_names_what_the_last_traceback_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rank_error(RANKS_FAILED) == "ValueError: the last failure\non two lines"
    assert rank_error("torchrun: error: unrecognized arguments\nusage: torchrun ...\n") == (
        "torchrun: error: unrecognized arguments\nusage: torchrun ...")  # no rank lines: the output's last lines
    _fake_torchrun(monkeypatch, returncode=1, stderr=RANKS_FAILED, write=False)
    with pytest.raises(TrainError, match=r"^torchrun with 2 process\(es\) failed \(exit 1\):\nValueError: the last"):
        launch("zoo:mlp", StepConfig(batch_size=8), DdpConfig(nproc=2), 2, threads=1)
    _fake_torchrun(monkeypatch, returncode=0, write=False)  # exit 0 without rank 0's result file
    with pytest.raises(TrainError, match=r"^torchrun with 2 process\(es\) failed \(exit 0\)"):
        launch("zoo:mlp", StepConfig(batch_size=8), DdpConfig(nproc=2), 2, threads=1)


def test_the_standalone_all_reduce_uses_ddps_buckets_and_times_after_two_warm_up_rounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The collectives are faked, on a fake clock: an all-reduce takes 1 ns per element, and 1 ms per element in the
    two warm-up rounds."""
    import types

    import torch.distributed as dist

    from dlperf.train import ddp

    now = [0]
    rounds: list[list[int]] = []

    def barrier() -> None:
        rounds.append([])

    def all_reduce(chunk: torch.Tensor, async_op: bool = False) -> None:
        rounds[-1].append(chunk.numel())
        now[0] += chunk.numel() * (1 if len(rounds) > 2 else 1_000_000)

    monkeypatch.setattr(dist, "barrier", barrier)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(ddp, "time", types.SimpleNamespace(perf_counter_ns=lambda: now[0]))
    grads = [torch.zeros(500_000), torch.zeros(100_000)]
    # DDP's own buckets when they add up to the gradients
    assert ddp._allreduce_s(grads, 25.0, iters=2, bucket_bytes=[400_000, 2_000_000]) == pytest.approx(600_000 / 1e9)
    assert len(rounds) == 4 and rounds[-1] == [100_000, 500_000]
    # else a 1 MiB first bucket (262144 fp32 values), then bucket_cap_mb ones
    rounds.clear()
    assert ddp._allreduce_s(grads, 1.0, iters=2, bucket_bytes=[4]) == pytest.approx(600_000 / 1e9)
    assert rounds[-1] == [262_144, 262_144, 75_712]


def test_a_disturbed_one_process_launch_is_named_beside_the_communication_factor_it_inflates() -> None:
    """2 ranks x 2 threads on 2 CPUs read "communication 97%" beside "43% of the step is exposed all-reduce": the
    1-process DDP step (317 ms) took 1.70x its no-sync step (186 ms), and the factor, efficiency / compute, takes
    the one as its baseline and the other as compute's."""
    r = DdpResult("w", "gloo", 2, 25.0, RankStats(1, 32, 0.317, 0.186, 0.0, 4 * 2**20, 3),
                  RankStats(2, 32, 0.500, 0.285, 0.010, 4 * 2**20, 3))
    assert r.comm_share == pytest.approx(0.43) and r.communication_scaling == pytest.approx(0.971, abs=1e-3)
    assert r.single_ddp_over_nosync == pytest.approx(1.704, abs=1e-3)
    found = findings_for(r, cpus=2, device="cpu")
    (disturbed,) = [f for f in found if f.startswith("the 1-process DDP step")]
    assert disturbed.startswith("the 1-process DDP step (317 ms) took 1.70x its no-sync step (186 ms), though one "
                                "process has no rank to all-reduce with")
    assert "communication reads 97%, where the 2 ranks' own steps leave 57% (43% of their step is exposed" in disturbed
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view({**r.to_dict(), "findings": found}))
    assert ("x communication 97% (the rest: the all-reduce and DDP's work with other ranks, against the 1-process DDP "
            "step); unreliable: the 1-process DDP step took 1.70x its no-sync step, which communication counts as its "
            "own; the ranks' exposed all-reduce leaves 57% (see the finding)") in console.export_text()
    # DDP's reducer costing one process a little (12 against 10 ms) is no disturbance
    calm = DdpResult("w", "gloo", 1, 25.0, RankStats(1, 32, 0.012, 0.010, 0.0, 4 * 2**20, 3),
                     RankStats(2, 32, 0.020, 0.0105, 0.005, 4 * 2**20, 3))
    assert calm.factors_note is None
    assert not [f for f in findings_for(calm, cpus=8, device="cpu") if f.startswith("the 1-process DDP step")]


def test_too_many_ranks_are_refused_before_a_run_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`dlperf train W --nproc 9` on 2 CPUs was refused only inside the recording, which kept a failed run in the
    store ("run 71a07fe4b2c5 is kept in the store as failed, with its error") for an option the user mistyped."""
    from dlperf.measure import env

    monkeypatch.setattr(env, "usable_cores", lambda: 2)
    store = tmp_path / "s.db"
    assert main(["train", "zoo:mlp", "--nproc", "9", "--no-mfu", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "--nproc (on CPU) 9 is more than 8, the most accepted on this machine" in err
    assert "kept in the store" not in err
    assert Store(store, create=True).list() == []


def test_a_ddp_step_no_longer_than_its_no_sync_step_tells_no_communication_story() -> None:
    """`--nproc 3 --steps 5` on 2 CPUs printed "communication 88%" beside "0% of the step is exposed gradient
    all-reduce (0 ms of 14.38 ms; the all-reduce alone takes 3.86 ms)" and "overlap: 0% ... hidden": the DDP step
    (14.38 ms) measured shorter than the no-sync step (14.97 ms), so the exposed time was clipped to 0, and the factor
    was the 1-process launch's noise (its DDP step 0.84x its no-sync step, inside the band that names it)."""
    r = DdpResult("w", "gloo", 1, 25.0, RankStats(1, 64, 0.0084, 0.0100, 0.0, 340008, 1),
                  RankStats(3, 64, 0.01438, 0.01497, 0.00386, 340008, 1))
    assert not r.communication_resolved and r.communication_scaling == pytest.approx(0.874, abs=1e-3)
    assert r.factors_note is not None and r.factors_note.startswith("unreliable: the ranks' DDP step took no longer")
    assert r.communication_note == ("not measured: the DDP step (14.4 ms) took no longer than the no-sync step (15 ms, "
                                    "compute alone), so what the all-reduce adds to a step is within this run's noise "
                                    "(the all-reduce alone takes 3.86 ms)")
    found = findings_for(r, cpus=2, device="cpu")
    assert found[0].startswith("3 ranks on 2 usable CPUs: more ranks than cores: ranks compete for cores, and at any "
                               "moment one waits for a core. Each rank's compute slows from sharing cores, not from "
                               "communication")
    assert any(f.startswith("the 3 ranks' DDP step (14.4 ms) took no longer than their no-sync step (15 ms)")
               and "the communication factor, 87%, is what is left of the efficiency's noise" in f for f in found)
    assert not [f for f in found if "against 87%" in f]  # the contention finding weighs no unmeasured factor
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view({**r.to_dict(), "findings": found}))
    text = console.export_text()
    assert "communication: not measured: the DDP step (14.4 ms)" in text and "exposed gradient all-reduce" not in text
    from dlperf.report.html_kinds import _ddp_view

    html = _ddp_view(r.to_dict())
    assert "communication: not measured: the DDP step (14.4 ms)" in html and "exposed gradient all-reduce" not in html
    # with more than one bucket an exposed 0 is not "all of the all-reduce hidden"
    many = DdpResult("w", "gloo", 1, 25.0, RankStats(1, 64, 0.010, 0.010, 0.0, 4 * 2**20, 3),
                     RankStats(2, 64, 0.010, 0.011, 0.004, 4 * 2**20, 3))
    assert many.overlap is None and many.communication_note is not None
    # a DDP step longer than its no-sync step has its story as before; 2 ranks on 2 CPUs are not too many
    calm = _result(step_1=0.010, step_n=0.0125, nosync_n=0.010, allreduce=0.005)
    assert calm.communication_resolved and calm.communication_note is None and calm.overlap == pytest.approx(0.5)
    assert not [f for f in findings_for(calm, cpus=2, device="cpu") if "more ranks than cores" in f]


def test_a_noisy_ddp_launch_gets_the_noise_note_a_single_process_run_gets() -> None:
    """`--nproc 2 --steps 5` on a loaded machine printed no noise note, where the measure and tune modes give
    Measurement.noise_warning's: each launch's slowest rank's steps now go through the same code."""
    from dlperf.measure.stats import Measurement

    noisy = [10_000_000, 14_000_000, 10_500_000, 20_000_000, 11_000_000]  # IQR 3.5 ms of an 11 ms median
    steady = [10_000_000, 10_100_000, 10_050_000, 10_020_000, 10_080_000]
    warning = Measurement(noisy).noise_warning
    assert warning is not None and warning.startswith("noisy: IQR is 32% of the median (> 10%)")
    single = RankStats(1, 32, 0.0100, 0.0100, 0.0, 4 * 2**20, 3, step_samples_ns=steady, nosync_samples_ns=steady)
    multi = RankStats(2, 32, 0.011, 0.0105, 0.002, 4 * 2**20, 3, step_samples_ns=noisy, nosync_samples_ns=steady)
    r = DdpResult("w", "gloo", 1, 25.0, single, multi)
    assert r.notes == [f"2 processes (the slowest rank), DDP step: {warning}"]
    assert RankStats.from_dict(multi.to_dict()).noise_notes == [f"DDP step: {warning}"]
    console = Console(width=1000, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(ddp_view(r.to_dict()))
    assert f"note: 2 processes (the slowest rank), DDP step: {warning}" in console.export_text()
    from dlperf.report.html_kinds import _ddp_view

    assert "note: 2 processes (the slowest rank), DDP step: noisy: IQR is 32%" in _ddp_view(r.to_dict())
    # one process: its launch's own notes; a record from before the samples were kept has none
    alone = RankStats(1, 32, 0.011, 0.0105, 0.0, 4 * 2**20, 3, step_samples_ns=noisy, nosync_samples_ns=steady)
    one = DdpResult("w", "gloo", 1, 25.0, alone, alone)
    assert one.notes == [f"1 process, DDP step: {warning}"]
    assert DdpResult("w", "gloo", 1, 25.0, RankStats(1, 32, 0.01, 0.01, 0.0, 1, 1),
                     RankStats(2, 32, 0.01, 0.01, 0.0, 1, 1)).notes == []
