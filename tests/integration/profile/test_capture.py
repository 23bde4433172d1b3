"""Capture with the real torch.profiler: phases, data wait, loader settings, shapes, restored threads."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dlperf.errors import WorkloadError
from dlperf.profile.analyzers import threads as threads_analysis
from dlperf.profile.capture import CaptureConfig, Step, StepOptions, capture
from dlperf.workload.base import TrainSpec, Workload
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.integration


def test_training_step_capture_has_every_phase() -> None:
    before = torch.get_num_threads()
    trace = capture(load_workload("zoo:mlp"), CaptureConfig(mode="train", steps=2, warmup_steps=1,
                                                           unprofiled_min_duration_s=0.1))
    assert len(trace.steps) == 2 and len(trace.unprofiled_step_s) >= 3
    # each unprofiled step's wait for its batch, one per timed step (the input-pipeline finding's other figure)
    assert len(trace.unprofiled_data_wait_s) == len(trace.unprofiled_step_s)
    assert all(0 < w < s for w, s in zip(trace.unprofiled_data_wait_s, trace.unprofiled_step_s, strict=True))
    for step in trace.steps:
        assert {"data", "h2d", "forward", "backward", "optimizer"} <= set(step.phase_us)
        assert step.data_wait_s > 0 and step.wall_s > step.data_wait_s
    phases = {o.phase for o in trace.ops if o.step >= 0}
    assert {"forward", "backward", "optimizer"} <= phases
    addmm = [o for o in trace.ops if o.name == "aten::addmm" and o.step == 0]
    assert len(addmm) == 3 and addmm[0].flops == 2 * 64 * 64 * 256  # batch 64, 64 -> 256
    assert addmm[0].input_shapes[1] == (64, 64)
    assert trace.loader is not None and trace.loader.is_dataloader and trace.loader.num_workers == 0
    assert trace.batch_size == 64
    assert trace.memory.peak_rss_bytes >= trace.memory.start_rss_bytes > 0
    assert torch.get_num_threads() == before


def test_tensor_list_inputs_and_thread_option() -> None:
    class Cat(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, x, x], dim=1).sum(dim=1)

    workload = Workload(name="cat", make_model=Cat, make_inputs=lambda b: (torch.randn(b, 16),))
    trace = capture(workload, CaptureConfig(steps=1, warmup_steps=0, unprofiled_min_duration_s=0.05,
                                            options=StepOptions(threads=1, batch_size=4)))
    cat = [o for o in trace.ops if o.name == "aten::cat" and o.step == 0]
    assert cat and cat[0].input_shapes[0] == ()  # a list of tensors has no single shape
    assert trace.threads.intra_op_threads == 1
    assert trace.batch_size == 4


def test_the_capture_says_whether_the_workloads_step_or_its_factory_sets_the_thread_count() -> None:
    """A forward calling torch.set_num_threads(3) got 'apply with: --threads 2' for its oversubscription, a fix that
    cannot hold (only --verify said so): the capture now records that the step sets the count; a model factory that
    sets it (overridden by the count dlperf sets before each step) is told apart, and a workload that sets none."""

    class SetsThreads(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_num_threads(3)
            return x * 2

    def factory_sets() -> torch.nn.Module:
        torch.set_num_threads(3)
        return torch.nn.Linear(16, 16)

    before = torch.get_num_threads()
    config = CaptureConfig(steps=1, warmup_steps=0, unprofiled_min_duration_s=0.05)
    seen = {}
    try:
        for name, make_model in (("step", SetsThreads), ("factory", factory_sets),
                                 ("none", lambda: torch.nn.Linear(16, 16))):
            torch.set_num_threads(1)
            workload = Workload(name=name, make_model=make_model, make_inputs=lambda b: (torch.ones(b, 16),))
            seen[name] = capture(workload, config).threads.threads_set_by
        step_sets = Workload(name="step", make_model=SetsThreads, make_inputs=lambda b: (torch.ones(b, 16),))
        with_option = capture(step_sets, replace(config, options=StepOptions(threads=1)))
    finally:
        torch.set_num_threads(before)
    assert seen == {"step": "step", "factory": "build", "none": None}
    assert with_option.threads.threads_set_by == "step"


def test_a_threads_option_the_workloads_step_undoes_is_a_caveat() -> None:
    """`dlperf profile e_threads.py --threads 2` on a forward calling torch.set_num_threads(1) printed "threads: 1
    intra-op / 2 inter-op on 2 usable cores" and nothing else: every figure was of 1 thread, not the 2 asked for."""
    from dlperf.profile.diagnose import analyze_all, diagnose
    from tests.unit.profile.builders import CEILINGS

    class OneThread(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_num_threads(1)
            return x * 2

    workload = Workload(name="one", make_model=OneThread, make_inputs=lambda b: (torch.ones(b, 16),))
    config = CaptureConfig(steps=1, unprofiled_min_duration_s=0.05)
    before = torch.get_num_threads()
    try:
        asked = capture(workload, replace(config, options=StepOptions(threads=2)))
        plain = capture(workload, config)
    finally:
        torch.set_num_threads(before)
    assert asked.threads.threads_asked == 2 and asked.threads.intra_op_threads == 1
    caveats = diagnose(analyze_all(asked, CEILINGS)).caveats
    assert ("--threads 2 did not hold: the workload sets its own thread count in its step (a torch.set_num_threads in "
            "its forward), and torch had 1 after each step, so the step ran on 1; remove that call to profile it on 2"
            ) in caveats
    # nothing asked, nothing said: the count is the workload's own choice
    assert plain.threads.threads_asked is None
    assert not any(c.startswith("--threads") for c in diagnose(analyze_all(plain, CEILINGS)).caveats)


def test_a_step_setting_the_thread_count_already_in_place_is_seen_by_the_warm_up_probe() -> None:
    """A forward calling torch.set_num_threads(N) with N threads already in place changed nothing the capture could
    see, so it read as setting no count and got a `--threads` fix that its forward undoes; the first warm-up step now
    runs under another count, which such a forward changes back. A workload setting none keeps the count it had."""

    class SetsTwo(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_num_threads(2)
            return x * 2

    before = torch.get_num_threads()
    config = CaptureConfig(steps=1, warmup_steps=1, unprofiled_min_duration_s=0.05)
    try:
        torch.set_num_threads(2)
        sets = capture(Workload(name="sets", make_model=SetsTwo, make_inputs=lambda b: (torch.ones(b, 16),)), config)
        torch.set_num_threads(2)
        plain = capture(Workload(name="plain", make_model=lambda: torch.nn.Linear(16, 16),
                                 make_inputs=lambda b: (torch.ones(b, 16),)), config)
        after_plain = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert sets.threads.threads_set_by == "step"
    assert plain.threads.threads_set_by is None
    assert after_plain == 2
    assert sets.threads.threads_probed and plain.threads.threads_probed



def test_the_warm_up_probe_runs_under_threads_too() -> None:
    """The probe was skipped where --threads was given: `--threads 2` with a forward setting 2 read as setting none,
    so a --threads fix to another count (which that forward undoes) could be offered."""

    class SetsTwo(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_num_threads(2)
            return x * 2

    before = torch.get_num_threads()
    config = CaptureConfig(steps=1, warmup_steps=1, unprofiled_min_duration_s=0.05, options=StepOptions(threads=2))
    try:
        torch.set_num_threads(3)
        sets = capture(Workload(name="sets", make_model=SetsTwo, make_inputs=lambda b: (torch.ones(b, 16),)), config)
        plain = capture(Workload(name="plain", make_model=lambda: torch.nn.Linear(16, 16),
                                 make_inputs=lambda b: (torch.ones(b, 16),)), config)
    finally:
        torch.set_num_threads(before)
    assert sets.threads.threads_set_by == "step" and sets.threads.threads_probed
    assert plain.threads.threads_set_by is None and plain.threads.threads_probed
    assert plain.threads.intra_op_threads == 2  # the probe's count put back to the --threads one


def test_with_no_warm_up_step_inference_is_probed_by_its_check_call_and_training_says_it_was_not() -> None:
    """The probe ran in the first warm-up step only: with none, an inference forward setting the count already in
    place read as setting none (threads_probed False), though the step's untimed check call could run under the
    probe count. Training has no such call: it still says no step was probed."""

    class SetsTwo(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_num_threads(2)
            return self.linear(x)

    def loader(batch_size: int, **kwargs: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.ones(batch_size, 16), torch.zeros(batch_size, 16))]

    def sgd(params: object) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1)  # type: ignore[arg-type]

    sets = Workload(name="sets", make_model=SetsTwo, make_inputs=lambda b: (torch.ones(b, 16),),
                    train=TrainSpec(make_loader=loader, loss_fn=torch.nn.functional.mse_loss,
                                    make_optimizer=sgd, batch_size=4))
    plain = Workload(name="plain", make_model=lambda: torch.nn.Linear(16, 16),
                     make_inputs=lambda b: (torch.ones(b, 16),))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        inference = capture(sets, CaptureConfig(steps=1, warmup_steps=0, unprofiled_min_duration_s=0.05))
        plain_trace = capture(plain, CaptureConfig(steps=1, warmup_steps=0, unprofiled_min_duration_s=0.05))
        train = capture(sets, CaptureConfig(mode="train", steps=1, warmup_steps=0, unprofiled_min_duration_s=0.05))
    finally:
        torch.set_num_threads(before)
    assert inference.threads.threads_set_by == "step" and inference.threads.threads_probed
    assert plain_trace.threads.threads_set_by is None and plain_trace.threads.threads_probed
    assert plain_trace.threads.intra_op_threads == 2  # the probe's count put back
    assert train.threads.threads_set_by is None and train.threads.threads_probed is False


def test_train_without_a_train_spec_is_a_workload_error() -> None:
    workload = Workload(name="no-train", make_model=lambda: torch.nn.Linear(2, 2),
                        make_inputs=lambda b: (torch.randn(b, 2),))
    with pytest.raises(WorkloadError, match="no training spec"):
        capture(workload, CaptureConfig(mode="train", steps=1))


def test_a_failing_loader_or_optimizer_factory_is_named_with_the_users_frame() -> None:
    """Profile called the training factories bare: a loader factory raising inside reached the user as 'make_loader
    rejected {}' (any TypeError was taken for a signature without **kwargs), an optimizer factory's error as a
    traceback without the workload's name."""
    def make(make_loader: object, make_optimizer: object) -> Workload:
        return Workload(name="factories", make_model=lambda: torch.nn.Linear(2, 2),
                        make_inputs=lambda b: (torch.randn(b, 2),),
                        train=TrainSpec(make_loader=make_loader, loss_fn=torch.nn.functional.mse_loss,  # type: ignore[arg-type]
                                        make_optimizer=make_optimizer))  # type: ignore[arg-type]

    def sgd(params: object) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1)  # type: ignore[arg-type]

    def broken_loader(batch_size: int, **kwargs: object) -> object:
        return [(torch.randn(batch_size, 2), None)] + 1  # type: ignore[operator]

    with pytest.raises(WorkloadError, match=r"^workload 'factories': its loader factory raised TypeError: can only "
                                            r"concatenate list .*\n.*test_capture.py.*line \d+, in broken_loader"):
        capture(make(broken_loader, sgd), CaptureConfig(mode="train", steps=1))

    def narrow_loader(batch_size: int) -> object:
        return [(torch.randn(batch_size, 2), torch.randn(batch_size, 2))]

    with pytest.raises(WorkloadError, match=r"^workload 'factories': its loader factory does not take num_workers "):
        capture(make(narrow_loader, sgd), CaptureConfig(mode="train", steps=1,
                                                        options=StepOptions(loader_kwargs=(("num_workers", 1),))))

    def no_optimizer(params: object) -> torch.optim.Optimizer:
        raise ValueError("lr missing")

    with pytest.raises(WorkloadError, match=r"^workload 'factories': its optimizer factory raised ValueError: "
                                            r"lr missing"):
        capture(make(narrow_loader, no_optimizer), CaptureConfig(mode="train", steps=1))


def test_the_memory_timeline_shows_memory_held_not_allocations_summed() -> None:
    """An inference step frees what it allocates: the memory held at the end of every profiled step is the same."""
    trace = capture(load_workload("zoo:mlp"), CaptureConfig(steps=4, warmup_steps=1, unprofiled_min_duration_s=0.05))
    timeline = trace.memory.timeline
    assert timeline and any(b < a for (_, a), (_, b) in itertools.pairwise(timeline))  # frees
    ends = [[b for t, b in timeline if t <= s.end_us][-1] for s in trace.steps]
    assert max(ends) - min(ends) <= 4096, ends


def test_more_loader_workers_than_cpus_is_said_once_by_the_analysis_not_by_torch_at_each_build() -> None:
    """torch's check_worker_number_rationality UserWarning came on stderr at each DataLoader() and iter() (four times
    with --verify), though `dlperf train` says it once; now the loader analysis carries it, for the loader line."""
    import warnings

    from torch.utils.data import DataLoader, TensorDataset

    from dlperf.measure.env import usable_cores
    from dlperf.profile.analyzers import dataloader

    workers = usable_cores() + 1

    def make_loader(batch_size: int, **kwargs: object) -> DataLoader[tuple[torch.Tensor, ...]]:
        data = TensorDataset(torch.randn(64, 2), torch.randn(64, 2))
        return DataLoader(data, batch_size=batch_size, num_workers=workers, **kwargs)  # type: ignore[arg-type]

    wl = Workload(name="crowded", make_model=lambda: torch.nn.Linear(2, 2), make_inputs=lambda b: (torch.randn(b, 2),),
                  train=TrainSpec(make_loader=make_loader, loss_fn=torch.nn.functional.mse_loss,
                                  make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = capture(wl, CaptureConfig(mode="train", steps=1, warmup_steps=1, unprofiled_min_duration_s=0.05))
    assert [str(w.message) for w in caught if "worker processes in total" in str(w.message)] == []
    note = dataloader.analyze(trace).too_many_workers
    assert note is not None and note.startswith(f"{workers} DataLoader workers on {workers - 1} usable CPU")


def _trainable(make_loader: object, make_optimizer: object = None) -> Workload:
    """A Linear(2, 2) with dropout, trained with MSE on what `make_loader` yields."""
    def sgd(params: object) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1)  # type: ignore[arg-type]

    return Workload(name="trainable", make_model=lambda: torch.nn.Sequential(torch.nn.Linear(2, 2),
                                                                           torch.nn.Dropout(0.5)),
                    make_inputs=lambda b: (torch.randn(b, 2),),
                    train=TrainSpec(make_loader=make_loader, loss_fn=torch.nn.functional.mse_loss,  # type: ignore[arg-type]
                                    make_optimizer=make_optimizer or sgd, batch_size=4))  # type: ignore[arg-type]


def test_a_training_step_trains_a_model_in_train_mode_and_frees_its_gradients_again() -> None:
    """Dropout and batch norm behave as in training, and no step starts with the last one's gradients held."""
    one_batch = [(torch.randn(4, 2), torch.randn(4, 2))]
    step = Step(_trainable(lambda batch_size, **kw: one_batch), "train", "cpu", StepOptions())
    assert step.model.training
    for _ in range(3):  # a loader of one batch is iterated again at each step
        step()
    assert all(p.grad is None for p in step.model.parameters())
    assert not Step(_trainable(lambda batch_size, **kw: one_batch), "inference", "cpu", StepOptions()).model.training


def test_a_loader_without_a_batch_or_an_optimizer_that_cannot_step_is_named() -> None:
    empty = Step(_trainable(lambda batch_size, **kw: []), "train", "cpu", StepOptions())
    with pytest.raises(WorkloadError, match=r"^workload 'trainable': its loader yields no batch at batch size 4$"):
        empty()
    with pytest.raises(WorkloadError, match=r"^workload 'trainable': its optimizer factory returned str 'sgd', not a "
                                            r"torch.optim.Optimizer"):
        Step(_trainable(lambda batch_size, **kw: [], lambda params: "sgd"), "train", "cpu", StepOptions())


def test_a_make_loader_that_drops_the_fixs_dataloader_arguments_is_named() -> None:
    """`profile --train --verify` on a make_loader that built its DataLoader without the keyword arguments timed the
    loader fix against the loader as it was, and reported the input-pipeline estimate as not holding (0.97x)."""
    from torch.utils.data import DataLoader, TensorDataset

    def make_loader(batch_size: int, **kwargs: object) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 2)), batch_size=batch_size)

    options = StepOptions(loader_kwargs=(("num_workers", 2), ("persistent_workers", True)))
    with pytest.raises(WorkloadError) as caught:
        Step(_trainable(make_loader), "train", "cpu", options)
    assert str(caught.value) == (
        "workload 'trainable': its make_loader was given num_workers=2, persistent_workers=True, but its DataLoader "
        "has num_workers=0, persistent_workers=False: pass make_loader's keyword arguments on (DataLoader(..., "
        "**dataloader_kwargs)); the DataLoader fix --verify measures acts through them")
    Step(_trainable(make_loader), "train", "cpu", StepOptions())  # nothing asked, nothing dropped


def test_an_optimizer_fix_rebuilds_the_workloads_optimizer_with_that_implementation_and_its_settings() -> None:
    """The optimizer fix --verify measures: the same optimizer, learning rate and groups, with fused=True or
    foreach=True; an optimizer without that implementation is named."""
    one_batch = [(torch.randn(4, 2), torch.randn(4, 2))]

    def adam(params: object) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=0.01, foreach=False)  # type: ignore[arg-type]

    for impl in ("fused", "foreach"):
        step = Step(_trainable(lambda batch_size, **kw: one_batch, adam), "train", "cpu",
                    StepOptions(optimizer_impl=impl))
        optimizer = step.optimizer
        assert isinstance(optimizer, torch.optim.Adam)
        group = optimizer.param_groups[0]
        assert (group[impl], group["lr"], len(group["params"])) == (True, 0.01, 2)
        step()
    with pytest.raises(WorkloadError, match=r"^workload 'trainable': Rprop has no fused implementation here: "):
        Step(_trainable(lambda batch_size, **kw: one_batch, lambda params: torch.optim.Rprop(params)), "train",
             "cpu", StepOptions(optimizer_impl="fused"))


def test_the_loader_settings_are_read_from_the_dataloader_the_factory_built() -> None:
    from torch.utils.data import DataLoader, TensorDataset

    def make_loader(batch_size: int, **kwargs: object) -> DataLoader[tuple[torch.Tensor, ...]]:
        data = TensorDataset(torch.randn(16, 2), torch.randn(16, 2))
        return DataLoader(data, batch_size=batch_size, **kwargs)  # type: ignore[arg-type]

    options = StepOptions(batch_size=8, loader_kwargs=(("num_workers", 2), ("prefetch_factor", 3),
                                                       ("persistent_workers", True)))
    step = Step(_trainable(make_loader), "train", "cpu", options)  # built, never iterated: no worker starts
    info = step.loader_info()
    assert info is not None and info.is_dataloader
    assert (info.num_workers, info.prefetch_factor, info.persistent_workers, info.batch_size, info.pin_memory) == (
        2, 3, True, 8, False)
    step.close()


def _linear() -> Workload:
    return Workload(name="lin", make_model=lambda: torch.nn.Linear(4, 4), make_inputs=lambda b: (torch.randn(b, 4),))


def test_the_memory_budget_and_the_cores_are_the_capture_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --memory-budget the budget is the RSS at start plus the RAM available; the usable cores are those the
    process may run on (here 1 of them), not every core the machine has."""
    from dlperf.profile import capture as capture_module

    monkeypatch.setattr(capture_module, "usable_cores", lambda: 1)
    workload = _linear()
    quick = CaptureConfig(steps=1, warmup_steps=0, unprofiled_min_duration_s=0.01)
    mem = capture(workload, quick).memory
    assert mem.budget_bytes == mem.start_rss_bytes + mem.available_bytes
    assert mem.budget_source == "RSS at start + available RAM"
    budgeted = capture(workload, replace(quick, memory_budget_bytes=1 << 30))
    assert (budgeted.memory.budget_bytes, budgeted.memory.budget_source) == (1 << 30, "--memory-budget")
    assert budgeted.threads.usable_cores == 1


def test_the_profiler_starts_on_a_step_of_its_own_before_the_analysed_ones() -> None:
    """The profiler's start-up cost lands in one unmarked step; the analysed steps are the ones after it."""
    from dlperf.profile.capture import _profile_steps

    class Counted:
        workload = _linear()
        batch_size = 1
        last_data_wait_s = 0.0
        calls = 0

        def __call__(self) -> None:
            self.calls += 1
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))

    counted = Counted()
    trace = _profile_steps(counted, CaptureConfig(steps=3))  # type: ignore[arg-type]
    assert counted.calls == 4 and len(trace.steps) == 3


def test_an_empty_trace_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiler's export can fail without a word and leave an empty file (a file system that took nothing)."""
    import torch.profiler

    from dlperf.errors import ProfileError

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", lambda self, path: Path(path).touch())
    path = tmp_path / "trace.json"
    workload = _linear()
    with pytest.raises(ProfileError, match="the profiler wrote no trace to"):
        capture(workload, CaptureConfig(steps=1, warmup_steps=0, unprofiled_min_duration_s=0.01, trace_path=str(path)))


def test_a_channels_last_inference_step_gives_its_model_channels_last_inputs() -> None:
    """As the channels_last pass runs the model: --verify's channels_last fix measured NCHW inputs reordered by the
    first convolution, not the layout the pass deploys."""
    seen: list[bool] = []

    class Conv(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(x.is_contiguous(memory_format=torch.channels_last))
            return self.conv(x)

    workload = Workload(name="conv", make_model=Conv, make_inputs=lambda b: (torch.randn(b, 3, 8, 8),), kind="cnn")
    step = Step(workload, "inference", "cpu", StepOptions(batch_size=2, channels_last=True))
    step()
    assert seen and all(seen)


class _Sleepy(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample waits 5 ms (like a read from disk) or computes for 2 ms."""

    def __init__(self, compute: bool) -> None:
        self.compute = compute

    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import time

        started = time.thread_time()
        if not self.compute:
            time.sleep(0.005)
        while self.compute and time.thread_time() - started < 0.002:
            pass
        return torch.ones(2), torch.ones(2)


class _Wrapper:
    """A loader of the user's own whose __iter__ yields from the DataLoader it holds."""

    def __init__(self, loader: torch.utils.data.DataLoader[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.loader = loader

    def __iter__(self) -> object:
        yield from self.loader


@pytest.mark.skipif(not Path("/proc/thread-self/schedstat").exists(), reason="reads Linux's schedstat")
@pytest.mark.parametrize("workers", [0, 2])
def test_loading_that_waits_on_io_is_told_from_loading_that_computes(workers: int) -> None:
    """The input-pipeline estimate capped every loader by the free cores; a loader that sleeps needs none. Read for the
    main thread without workers, for the workers with them (here behind a loader that wraps the DataLoader)."""
    from torch.utils.data import DataLoader

    def share(compute: bool) -> float | None:
        def make_loader(batch_size: int, **kwargs: object) -> object:
            return _Wrapper(DataLoader(_Sleepy(compute), batch_size=batch_size, **kwargs))  # type: ignore[arg-type]

        options = StepOptions(batch_size=4, loader_kwargs=(("num_workers", workers),) if workers else ())
        trace = capture(_trainable(make_loader), CaptureConfig(mode="train", steps=1, warmup_steps=2,
                                                               unprofiled_min_duration_s=0.3, options=options))
        assert trace.loader is not None and trace.loader.is_dataloader  # read through the wrapper
        assert trace.loader.num_workers == workers
        return trace.loader_core_share

    sleeping, computing = share(compute=False), share(compute=True)
    # workers idle a little at each epoch's end, and the machine's other processes keep a loader from its core (which
    # counts as needing one, as does the wait for a core after each sleep): the computing loader read 0.6 to 0.95
    # here, the sleeping one up to 0.32 with 2 ms sleeps beside two busy processes on 2 cores
    assert sleeping is not None and sleeping < 0.4
    assert computing is not None and computing > 0.5


def test_the_cores_the_loaders_workers_keep_busy_are_counted_as_this_processs_not_other_processes() -> None:
    """2 workers computing their samples were read as other processes' load (the machine's use less this process's):
    the free cores looked fewer and the machine busier than it was."""
    from torch.utils.data import DataLoader

    def make_loader(batch_size: int, **kwargs: object) -> object:
        return DataLoader(_Sleepy(compute=True), batch_size=batch_size, **kwargs)  # type: ignore[arg-type]

    options = StepOptions(batch_size=4, loader_kwargs=(("num_workers", 2), ("persistent_workers", True)))
    trace = capture(_trainable(make_loader), CaptureConfig(mode="train", steps=1, warmup_steps=2,
                                                           unprofiled_min_duration_s=0.3, options=options))
    t = trace.threads
    assert t.loader_workers == 2
    # each worker computes 8 ms a batch for a step of well under 1 ms: busy whenever the machine lets it run (0.5 to
    # 1.6 cores here beside other processes on 2 cores)
    assert 0.2 < t.loader_workers_busy_cores <= 2.0 + 0.1
    analysed = threads_analysis.analyze(trace)
    machine = t.system_cpu_percent / 100.0 * t.logical_cores
    assert analysed.other_busy_cores == pytest.approx(
        max(0.0, machine - t.process_cpu_percent / 100.0 - t.loader_workers_busy_cores))


def test_a_loader_that_wraps_a_dataloader_is_read_on_it() -> None:
    """A loader of the user's own whose __iter__ yields from a DataLoader read 'not a torch DataLoader: its settings
    cannot be read or changed', though its make_loader passes the fix's arguments on to it."""
    from torch.utils.data import DataLoader, TensorDataset

    def make_loader(batch_size: int, **kwargs: object) -> object:
        data = TensorDataset(torch.randn(16, 2), torch.randn(16, 2))
        return _Wrapper(DataLoader(data, batch_size=batch_size, **kwargs))  # type: ignore[arg-type]

    step = Step(_trainable(make_loader), "train", "cpu", StepOptions(batch_size=8, loader_kwargs=(("num_workers", 2),)))
    info = step.loader_info()
    assert info is not None and info.is_dataloader and (info.num_workers, info.batch_size) == (2, 8)
    step()  # its workers start, and close ends them
    pids = step.workers.pids(step._iter)
    assert len(pids) == 2
    step.close()
    assert all(not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
               for pid in pids)
