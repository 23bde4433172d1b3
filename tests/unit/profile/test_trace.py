from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from dlperf.errors import ProfileError
from dlperf.profile.trace import DTYPE_BYTES, dtype_kind, merged_length
from tests.unit.profile.builders import op, trace

pytestmark = pytest.mark.unit


def test_merged_length_counts_overlaps_once() -> None:
    assert merged_length([(0, 10), (5, 15), (20, 25)]) == 20
    assert merged_length([]) == 0
    assert merged_length([(3, 4), (0, 10)]) == 10


def test_dtype_kind_takes_the_first_tensor_dtype() -> None:
    assert dtype_kind(("Scalar", "c10::BFloat16", "float")) == "bf16"
    assert dtype_kind(("signed char",)) == "int8"
    assert dtype_kind(("Scalar",)) == "fp32"


def test_validate_rejects_empty_and_bad_traces() -> None:
    good = trace([op("aten::add", 0, 10)])
    assert good.validate() is good
    with pytest.raises(ProfileError, match="no operator events"):
        trace([]).validate()
    bad_mode = trace([op("aten::add", 0, 10)])
    bad_mode.mode = "serve"
    with pytest.raises(ProfileError, match="unknown mode"):
        bad_mode.validate()
    no_steps = trace([op("aten::add", 0, 10)])
    no_steps.steps = []
    with pytest.raises(ProfileError, match="no profiled steps"):
        no_steps.validate()


def test_summary_has_no_event_lists() -> None:
    s = trace([op("aten::add", 0, 10)], steps=2).summary()
    assert s["steps"] == 2 and s["op_events"] == 1
    assert "timeline" not in s["memory"]


def test_gpu_copies_of_record_function_ranges_are_neither_steps_nor_kernels() -> None:
    """With CUDA activity on, torch.profiler also lists each record_function range as a CUDA event of the same
    name (is_user_annotation=True, pytorch/pytorch#144613): the trace takes its steps and phases from the host
    ranges and counts only real kernels. Built from torch's own FunctionEvent, as prof.events() returns them."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from dlperf.profile.capture import events_to_trace

    ids = iter(range(1000))

    def event(name: str, start: float, end: float, device: DeviceType = DeviceType.CPU,
              annotation: bool = False) -> FunctionEvent:
        return FunctionEvent(next(ids), name, thread=1, start_us=start, end_us=end, device_type=device,
                             is_user_annotation=annotation)

    events = []
    for k in range(2):
        t = k * 1000.0
        events += [event("dlperf/step", t, t + 900, annotation=True),
                   event("dlperf/forward", t + 10, t + 400, annotation=True),
                   event("aten::mm", t + 20, t + 300),
                   event("dlperf/step", t + 30, t + 950, DeviceType.CUDA, annotation=True),
                   event("dlperf/forward", t + 30, t + 600, DeviceType.CUDA, annotation=True),
                   event("ampere_sgemm_128x64_nn", t + 40, t + 500, DeviceType.CUDA)]
    tr = events_to_trace(events, [0.001, 0.001], [0.0, 0.0], "w", "inference", "cuda", 8)
    assert [(s.start_us, s.end_us) for s in tr.steps] == [(0.0, 900.0), (1000.0, 1900.0)]
    assert [s.phase_us for s in tr.steps] == [{"forward": 390.0}, {"forward": 390.0}]  # the host ranges
    assert [(k.name, k.step) for k in tr.kernels] == [("ampere_sgemm_128x64_nn", 0), ("ampere_sgemm_128x64_nn", 1)]
    assert [(o.name, o.phase) for o in tr.ops] == [("aten::mm", "forward"), ("aten::mm", "forward")]


def test_cuda_runtime_calls_are_not_operators_and_ops_carry_their_kernel_time() -> None:
    """On CUDA the profiler records runtime API calls (cudaLaunchKernel, cudaDeviceSynchronize) as host events,
    each kernel linked to the op that launched it. The trace keeps the ops only, gives each op the time of its
    own kernels, and counts a synchronize outside every op as the host waiting for the device."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from dlperf.profile.capture import events_to_trace

    ids = iter(range(1000))

    def event(name: str, start: float, end: float, activity: str | None = None,
              annotation: bool = False, parent: FunctionEvent | None = None) -> FunctionEvent:
        e = FunctionEvent(next(ids), name, thread=1, start_us=start, end_us=end, device_type=DeviceType.CPU,
                          is_user_annotation=annotation, use_device="cuda", activity_type=activity)
        if parent is not None:
            parent.append_cpu_child(e)
            e.set_cpu_parent(parent)
        return e

    step = event("dlperf/step", 0, 1000, "user_annotation", annotation=True)
    forward = event("dlperf/forward", 10, 200, "user_annotation", annotation=True, parent=step)
    linear = event("aten::linear", 20, 120, "cpu_op", parent=forward)
    addmm = event("aten::addmm", 30, 110, "cpu_op", parent=linear)
    launch = event("cudaLaunchKernel", 40, 100, "cuda_runtime", parent=addmm)
    addmm.append_kernel("ampere_sgemm_128x64_nn", 0, 700.0)
    sync = event("cudaDeviceSynchronize", 210, 990, "cuda_runtime", parent=step)
    events = [step, forward, linear, addmm, launch, sync]

    tr = events_to_trace(events, [0.001], [0.0], "w", "inference", "cuda", 8)
    assert [(o.name, o.depth, o.is_leaf) for o in tr.ops] == [("aten::linear", 0, False), ("aten::addmm", 1, True)]
    assert [o.device_us for o in tr.ops] == [0.0, 700.0]
    assert tr.steps[0].device_sync_us == 780.0
    # The same events read as a CPU profile: no device time, no device wait (the runtime calls still not ops).
    tr_cpu = events_to_trace(events, [0.001], [0.0], "w", "inference", "cpu", 8)
    assert [o.device_us for o in tr_cpu.ops] == [0.0, 0.0]
    # Without activity_type (older torch) the runtime calls are known by their names.
    launch.activity_type = sync.activity_type = None
    tr_old = events_to_trace(events, [0.001], [0.0], "w", "inference", "cuda", 8)
    assert [o.name for o in tr_old.ops] == ["aten::linear", "aten::addmm"] and tr_old.steps[0].device_sync_us == 780.0


def test_the_memory_timeline_subtracts_frees_outside_operators() -> None:
    """Each step allocates 1 MiB in an op and frees it after the op (when Python drops the tensor): the memory
    held returns to the same level after every step, so the line does not rise."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from dlperf.profile.analyzers import memory
    from dlperf.profile.capture import events_to_trace
    from dlperf.report.profile_view import _spark

    events, records = [], []
    for k in range(4):
        t = k * 1000.0
        events += [FunctionEvent(2 * k, "dlperf/step", thread=1, start_us=t, end_us=t + 900,
                                 device_type=DeviceType.CPU, is_user_annotation=True),
                   FunctionEvent(2 * k + 1, "aten::empty", thread=1, start_us=t + 10, end_us=t + 20,
                                 device_type=DeviceType.CPU, cpu_memory_usage=1 << 20)]
        records += [(t + 15, 1 << 20), (t + 500, -(1 << 20))]
    tr = events_to_trace(events, [0.001] * 4, [0.0] * 4, "w", "inference", "cpu", 8, records)
    tr.memory.budget_bytes = 1 << 30
    held = [b for _, b in tr.memory.timeline]
    assert held == [1 << 20, 0] * 4
    assert memory.analyze(tr).step_allocated_peak_bytes == 1 << 20
    assert _spark([float(b) for b in held]) == "█▁" * 4
    assert events_to_trace(events, [0.001] * 4, [0.0] * 4, "w", "inference", "cpu", 8).memory.timeline == []


def test_input_dtypes_come_from_kineto_where_function_events_lack_them() -> None:
    """torch 2.11's FunctionEvents have no input_dtypes; kineto's events of the same ids do (2.13 carries both,
    so here they must agree), and an operator without them gets them from there."""
    import torch
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent
    from torch.profiler import ProfilerActivity, profile

    from dlperf.profile.capture import events_to_trace, host_input_dtypes

    a = torch.ones(8, 8, dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.mm(a, a)
    mms = [e for e in prof.events() if e.name == "aten::mm"]
    assert mms and all(e.input_dtypes for e in mms)
    by_id = host_input_dtypes(prof)
    assert all(by_id[e.id] == tuple(str(d) for d in e.input_dtypes) for e in mms)

    events = [FunctionEvent(1, "dlperf/step", thread=1, start_us=0, end_us=900, device_type=DeviceType.CPU,
                            is_user_annotation=True),
              FunctionEvent(2, "aten::mm", thread=1, start_us=10, end_us=20, device_type=DeviceType.CPU)]
    assert not events[1].input_dtypes
    tr = events_to_trace(events, [0.001], [0.0], "w", "inference", "cpu", 8,
                         input_dtypes={2: ("c10::BFloat16", "c10::BFloat16")})
    assert [o.input_dtypes for o in tr.ops] == [("c10::BFloat16", "c10::BFloat16")]
    assert dtype_kind(tr.ops[0].input_dtypes) == "bf16"


def test_convolution_flops_go_to_the_innermost_convolution_whatever_the_self_times() -> None:
    """conv2d -> convolution -> _convolution -> mkldnn_convolution: the FLOPs the profiler puts on conv2d belong
    to the innermost op. They moved only when its self time beat the wrapper's; a step where it did not (a
    descheduled wrapper) left them on conv2d, whose microseconds then ran "at 268% of its roofline"."""
    from dataclasses import dataclass, field

    from dlperf.profile.capture import _moved_flops

    @dataclass(eq=False)
    class Ev:
        name: str
        self_us: float
        flops: int = 0
        cpu_parent: Any = None
        cpu_children: list[Any] = field(default_factory=list)

    def chain(wrapper_self_us: float, worker_self_us: float) -> list[Ev]:
        names = ["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution"]
        events = [Ev(n, s) for n, s in zip(names, [wrapper_self_us, 1.0, 1.0, worker_self_us], strict=True)]
        events[0].flops = 1_000_000
        for parent, child in itertools.pairwise(events):
            parent.cpu_children.append(child)
            child.cpu_parent = parent
        return events

    for wrapper, worker in ((2.0, 50.0), (80.0, 50.0)):  # a normal step, and one whose wrapper was descheduled
        events = chain(wrapper, worker)
        moved = _moved_flops(events, lambda e: True, lambda e: e.self_us)
        assert moved == {id(events[3]): 1_000_000, id(events[0]): 0}


def _event(ids: Iterator[int], name: str, start: float, end: float, parent: Any = None, *,
           activity: str | None = None, annotation: bool = False, **fields: Any) -> Any:
    """A host FunctionEvent as prof.events() gives it, nested under `parent`."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    e = FunctionEvent(next(ids), name, thread=1, start_us=start, end_us=end, device_type=DeviceType.CPU,
                      is_user_annotation=annotation, activity_type=activity, **fields)
    if parent is not None:
        parent.append_cpu_child(e)
        e.set_cpu_parent(parent)
    return e


def test_a_users_own_record_function_range_is_neither_an_operator_nor_a_level_of_nesting() -> None:
    """A `with record_function("my_block")` in the user's forward: its time is that of the operators inside it."""
    from dlperf.profile.capture import events_to_trace

    ids = itertools.count()
    step = _event(ids, "dlperf/step", 0, 1000, annotation=True)
    forward = _event(ids, "dlperf/forward", 10, 500, step, annotation=True)
    block = _event(ids, "my_block", 20, 400, forward, activity="user_annotation", annotation=True)
    mm = _event(ids, "aten::mm", 30, 300, block, activity="cpu_op")
    tr = events_to_trace([step, forward, block, mm], [0.001], [0.0], "w", "inference", "cpu", 8)
    assert [(o.name, o.depth, o.phase, o.is_leaf) for o in tr.ops] == [("aten::mm", 0, "forward", True)]


def test_operators_come_in_time_order_with_their_own_time_memory_and_the_convolutions_flops() -> None:
    """conv2d -> convolution -> mkldnn_convolution: each op's self time and self memory leave out its children's,
    and the FLOPs the profiler puts on conv2d go to the op doing the work."""
    from dlperf.profile.capture import events_to_trace

    ids = itertools.count()
    step = _event(ids, "dlperf/step", 0, 1000, annotation=True)
    forward = _event(ids, "dlperf/forward", 10, 900, step, annotation=True)
    conv2d = _event(ids, "aten::conv2d", 100, 400, forward, flops=1_000_000, cpu_memory_usage=3000)
    convolution = _event(ids, "aten::convolution", 110, 390, conv2d, cpu_memory_usage=1000)
    worker = _event(ids, "aten::mkldnn_convolution", 120, 380, convolution, cpu_memory_usage=1000)
    add = _event(ids, "aten::add", 20, 50, forward)  # listed last, runs first
    tr = events_to_trace([step, forward, conv2d, convolution, worker, add], [0.001], [0.0], "w", "inference",
                         "cpu", 8)
    assert [(o.name, o.self_us, o.self_memory_bytes, o.flops) for o in tr.ops] == [
        ("aten::add", 30.0, 0, 0),
        ("aten::conv2d", 20.0, 2000, 0),
        ("aten::convolution", 20.0, 0, 0),
        ("aten::mkldnn_convolution", 260.0, 1000, 1_000_000),
    ]


def test_the_device_wait_of_a_step_sums_its_synchronize_calls_outside_operators() -> None:
    """A synchronize inside an operator (`.item()`) is that op's time, and a kernel launch outside every op is no
    wait for the device: only the bare synchronize calls are, all of them."""
    from dlperf.profile.capture import events_to_trace

    ids = itertools.count()
    step = _event(ids, "dlperf/step", 0, 1000, activity="user_annotation", annotation=True)
    forward = _event(ids, "dlperf/forward", 10, 500, step, activity="user_annotation", annotation=True)
    item = _event(ids, "aten::item", 20, 200, forward, activity="cpu_op")
    inner = _event(ids, "cudaStreamSynchronize", 30, 190, item, activity="cuda_runtime")
    launch = _event(ids, "cudaLaunchKernel", 510, 520, step, activity="cuda_runtime")
    waits = [_event(ids, "cudaDeviceSynchronize", t, t + 100, step, activity="cuda_runtime") for t in (600, 800)]
    tr = events_to_trace([step, forward, item, inner, launch, *waits], [0.001], [0.0], "w", "inference", "cuda", 8)
    assert tr.steps[0].device_sync_us == 200.0
    assert [o.name for o in tr.ops] == ["aten::item"]


def test_the_memory_timeline_starts_with_the_first_profiled_step() -> None:
    """The unmarked step before the profiled ones allocates too: its memory is not the profiled steps'."""
    from dlperf.profile.capture import events_to_trace

    ids = itertools.count()
    step = _event(ids, "dlperf/step", 100, 900, annotation=True)
    records = [(50.0, 4096), (150.0, 1024), (950.0, -1024)]
    tr = events_to_trace([step], [0.001], [0.0], "w", "inference", "cpu", 8, records)
    assert tr.memory.timeline == [(150.0, 1024)]


def test_fewer_step_ranges_than_steps_timed_is_an_incomplete_trace() -> None:
    from dlperf.profile.capture import events_to_trace

    ids = itertools.count()
    step = _event(ids, "dlperf/step", 0, 900, annotation=True)
    with pytest.raises(ProfileError, match=r"recorded 1 step ranges for 2 steps: the trace is incomplete"):
        events_to_trace([step], [0.001, 0.001], [0.0, 0.0], "w", "inference", "cpu", 8)


def test_device_copies_are_told_apart_by_direction() -> None:
    from dlperf.profile.capture import _kernel_kind

    assert _kernel_kind("Memcpy HtoD (Pageable -> Device)") == "memcpy_h2d"
    assert _kernel_kind("Memcpy DtoH (Device -> Pinned)") == "memcpy_d2h"
    assert _kernel_kind("Memcpy DtoD (Device -> Device)") == "memcpy"
    assert _kernel_kind("Memset (Device)") == "memset"
    assert _kernel_kind("ampere_sgemm_128x64_nn") == "kernel"


def test_validate_rejects_a_step_that_ends_before_it_starts() -> None:
    backwards = trace([op("aten::add", 0, 10)])
    backwards.steps = [replace(backwards.steps[0], start_us=500.0, end_us=100.0)]
    with pytest.raises(ProfileError, match="step 0 has a negative or zero duration"):
        backwards.validate()


def test_the_summary_the_store_keeps_counts_and_carries_each_figure() -> None:
    from dlperf.profile.trace import KernelEvent, LoaderInfo

    tr = trace([op("aten::add", 0, 10), op("aten::mul", 10, 10)], unprofiled_s=0.004,
               loader=LoaderInfo(type_name="DataLoader", is_dataloader=True, num_workers=2))
    tr.kernels = [KernelEvent("k", 0.0, 1.0, 0)]
    tr.unprofiled_data_wait_s = [0.001, 0.002, 0.001]
    tr.cache_bytes = 50 << 20
    s = tr.summary()
    assert (s["op_events"], s["kernel_events"]) == (2, 1)
    assert s["profiled_step_s"] == [0.01] and s["unprofiled_step_s"] == [0.004] * 3
    assert s["unprofiled_data_wait_s"] == [0.001, 0.002, 0.001]
    assert s["loader"]["num_workers"] == 2 and s["cache_bytes"] == 50 << 20


def test_element_sizes_and_kinds_of_the_profilers_dtype_names_are_torchs() -> None:
    import torch

    names = {"float": torch.float32, "double": torch.float64, "c10::Half": torch.float16,
             "c10::BFloat16": torch.bfloat16, "long int": torch.int64, "int": torch.int32, "short int": torch.int16,
             "signed char": torch.int8, "unsigned char": torch.uint8, "bool": torch.bool, "c10::qint8": torch.qint8,
             "c10::quint8": torch.quint8, "c10::complex<float>": torch.complex64,
             "c10::complex<double>": torch.complex128}
    assert {name: dtype.itemsize for name, dtype in names.items()} == DTYPE_BYTES
    assert [dtype_kind((d,)) for d in ("unsigned char", "c10::quint8", "c10::Half")] == ["int8", "int8", "fp16"]


def test_an_operator_ends_its_duration_after_its_start_and_a_step_holds_only_its_own_operators() -> None:
    tr = trace([op("aten::add", 10, 50, self_us=5), op("aten::mul", 20, 5, step=1), op("aten::sub", 30, 5, step=-1)],
               steps=2)
    assert tr.ops[0].end_us == 60
    assert [o.name for o in tr.ops_in_step(1)] == ["aten::mul"]
    assert [o.name for o in tr.ops_in_step(0)] == ["aten::add"]


def test_a_convolution_inside_an_operator_without_flops_keeps_them() -> None:
    """A conv2d run inside a custom operator the profiler counts no FLOPs for: the FLOPs still go to the worker, not
    to the operator above, which has none to take them."""
    from dlperf.profile.capture import events_to_trace

    ids = itertools.count()
    step = _event(ids, "dlperf/step", 0, 1000, annotation=True)
    block = _event(ids, "mylib::fused_block", 10, 900, step)
    conv2d = _event(ids, "aten::conv2d", 100, 400, block, flops=1_000_000)
    worker = _event(ids, "aten::mkldnn_convolution", 120, 380, conv2d)
    tr = events_to_trace([step, block, conv2d, worker], [0.001], [0.0], "w", "inference", "cpu", 8)
    assert [(o.name, o.flops) for o in tr.ops] == [("mylib::fused_block", 0), ("aten::conv2d", 0),
                                                  ("aten::mkldnn_convolution", 1_000_000)]


class _Record:
    """One of kineto's events, as `prof.profiler.kineto_results.events()` gives them."""

    def __init__(self, name: str, device: Any, start_ns: int, nbytes: int) -> None:
        self._name, self._device, self._start_ns, self._nbytes = name, device, start_ns, nbytes

    def name(self) -> str:
        return self._name

    def device_type(self) -> Any:
        return self._device

    def start_ns(self) -> int:
        return self._start_ns

    def nbytes(self) -> int:
        return self._nbytes


def test_host_memory_records_include_onednns_and_a_cuda_profile_keeps_the_devices_own() -> None:
    """oneDNN's (MKLDNN, IDEEP) allocations are host memory too; on CUDA the timeline is the device's memory."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from dlperf.profile.capture import memory_records

    records = [_Record("[memory]", DeviceType.CUDA, 9_000, 64), _Record("[memory]", DeviceType.IDEEP, 5_000, 32),
               _Record("[memory]", DeviceType.MKLDNN, 3_000, -16), _Record("[memory]", DeviceType.CPU, 2_000, 8),
               _Record("aten::mm", DeviceType.CPU, 2_500, 0)]
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(
        trace_start_ns=lambda: 1_000, events=lambda: records)))
    assert memory_records(prof, "cpu") == [(1.0, 8), (2.0, -16), (4.0, 32)]
    assert memory_records(prof, "cuda:0") == [(8.0, 64)]


def test_operators_keep_the_strides_the_profiler_recorded_for_their_inputs() -> None:
    """`out.copy_(bias.expand(64, 384))`: the expanded bias has stride 0 in its first dimension."""
    from dlperf.profile.capture import events_to_trace

    ids = itertools.count()
    step = _event(ids, "dlperf/step", 0, 1000, annotation=True)
    forward = _event(ids, "dlperf/forward", 10, 900, step, annotation=True)
    copy = _event(ids, "aten::copy_", 100, 400, forward, input_shapes=[[64, 384], [64, 384], []],
                  structured_input_strides=[[384, 1], [0, 1], []])
    tr = events_to_trace([step, forward, copy], [0.001], [0.0], "w", "inference", "cpu", 8)
    assert tr.ops[0].input_strides == ((384, 1), (0, 1), ())
