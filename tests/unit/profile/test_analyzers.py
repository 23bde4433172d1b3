from __future__ import annotations

from dataclasses import replace

import pytest

from dlperf.errors import ProfileError
from dlperf.profile.analyzers import breakdown, dataloader, launch, memory, operators, threads
from dlperf.profile.trace import TRAIN, LoaderInfo, ProfileTrace, StepWindow
from tests.unit.profile.builders import (
    CEILINGS,
    FakeCeilings,
    elementwise,
    gemm,
    op,
    trace,
)
from tests.unit.profile.builders import (
    memory as mem_info,
)
from tests.unit.profile.builders import (
    threads as thread_info,
)

pytestmark = pytest.mark.unit


def test_breakdown_splits_phases_and_framework_overhead() -> None:
    # 10 ms training step: 4 ms data, 2 ms forward, 3 ms backward, 1 ms optimizer; operators cover 5 ms.
    ops = [op("aten::addmm", 4000, 1500, phase="forward"), op("aten::mm", 6000, 2500, phase="backward"),
           op("aten::add_", 9000, 1000, phase="optimizer"), op("aten::stack", 100, 3000, phase="data")]
    t = trace(ops, mode=TRAIN, data_wait_s=0.004,
              phase_us={"data": 4000, "forward": 2000, "backward": 3000, "optimizer": 1000}, unprofiled_s=0.005)
    b = breakdown.analyze(t)
    assert b.step_s == pytest.approx(0.010)
    assert b.data_wait_s == pytest.approx(0.004)
    assert (b.forward_s, b.backward_s, b.optimizer_s) == pytest.approx((0.002, 0.003, 0.001))
    assert b.operator_s == pytest.approx(0.005)  # the data phase's stack is not an operator of the step
    assert b.framework_overhead_s == pytest.approx(0.001)  # 6 ms outside data, 5 ms covered
    assert b.profiling_overhead == pytest.approx(2.0)
    assert b.device_idle_s is None


def test_launch_counts_tiny_ops_and_gaps() -> None:
    # 200 ops of 5 µs every 10 µs over a 2 ms step: 1 ms tiny-op time, 1 ms of gaps.
    ops = [op("aten::add", i * 10.0, 5.0) for i in range(200)]
    la = launch.analyze(trace(ops, step_us=2000.0))
    assert la.ops_per_step == 200
    assert la.median_op_us == pytest.approx(5.0)
    assert la.tiny_op_fraction == 1.0
    assert la.tiny_op_time_s == pytest.approx(0.001)
    assert la.gap_time_s == pytest.approx(0.001)
    assert la.overhead_share == pytest.approx(1.0)
    with pytest.raises(ValueError):
        launch.analyze(trace(ops), tiny_op_us=0)


def test_launch_share_is_of_the_whole_step_when_it_waits_for_data() -> None:
    """A training step waiting 18 of its 20 ms for data, with 2 ms of tiny operators and gaps: 10% of the step,
    not 100% of the part outside the data wait (which read "68% of the step" for 0.44 of 18 ms, promising 2x)."""
    ops = [op("aten::add", 18_000.0 + i * 10.0, 5.0, phase="forward") for i in range(200)]
    la = launch.analyze(trace(ops, step_us=20_000.0, mode=TRAIN, data_wait_s=0.018,
                              phase_us={"data": 18_000.0, "forward": 2_000.0}))
    assert la.busy_step_s == pytest.approx(0.002)
    assert la.tiny_op_time_s + la.gap_time_s == pytest.approx(0.002)
    assert la.overhead_share == pytest.approx(0.1)


def test_bytes_and_flops_of_a_gemm_and_a_view() -> None:
    b, f = operators.op_bytes_and_flops(gemm(0, 100, m=256, k=512, n=512))
    assert f == 2 * 256 * 512 * 512
    assert b == (512 + 256 * 512 + 512 * 512 + 256 * 512) * 4
    assert operators.op_bytes_and_flops(op("aten::view", 0, 1, shapes=((4, 4), (2,)), dtypes=("float", ""))) == (0, 0)
    # an elementwise op the profiler gives no FLOPs: one per output element; read + write
    b, f = operators.op_bytes_and_flops(elementwise(0, 100, numel=1000))
    assert (b, f) == (8000, 1000)


def test_a_reduction_of_one_tensor_reads_it_and_writes_next_to_nothing() -> None:
    """x.sum(dim=1) of a [4, 8M] fp32 tensor reads 128 MiB and writes 4 floats: counted as writing 128 MiB more, its
    15.4 ms read "17.45 GB/s, 75% of its roofline" for the 8.7 GB/s it moved. torch.max of two tensors is
    elementwise."""
    row_sum = op("aten::sum", 0, 100, shapes=((4, 8 << 20), (), (), ()), dtypes=("float", "ScalarList", "Scalar", ""))
    assert operators.op_bytes_and_flops(row_sum) == (4 * (8 << 20) * 4, 4 * (8 << 20))
    both = op("aten::max", 0, 100, shapes=((4, 1000), (4, 1000)), dtypes=("float", "float"))
    assert operators.op_bytes_and_flops(both)[0] == 3 * 4000 * 4


def test_a_copy_reads_its_source_once_per_stored_element_and_writes_its_destination() -> None:
    """Linear's bias goes into addmm's output as `out.copy_(bias.expand(4096, 384))`: 384 floats read, 4096 x 384
    written. Counted as reading out and the expanded bias, then writing out: 3x the traffic (MiniLM's copies at batch
    32 read 1.02 GB a step for 0.34 GB). A copy without strides recorded reads its source's shape."""
    from dataclasses import replace

    bias_copy = op("aten::copy_", 0, 100, shapes=((4096, 384), (4096, 384), ()), dtypes=("float", "float", "Scalar"))
    assert operators.op_bytes_and_flops(bias_copy)[0] == 4096 * 384 * 4 * 2
    strided = replace(bias_copy, input_strides=((384, 1), (0, 1), ()))
    assert operators.op_bytes_and_flops(strided)[0] == 384 * 4 + 4096 * 384 * 4
    cast = op("aten::copy_", 0, 100, shapes=((1000,), (1000,), ()), dtypes=("c10::BFloat16", "float", "Scalar"))
    assert operators.op_bytes_and_flops(cast)[0] == 1000 * 4 + 1000 * 2
    add = op("aten::add", 0, 100, shapes=((8, 100), (8, 100), ()), dtypes=("float", "float", "Scalar"))
    broadcast_add = replace(add, input_strides=((100, 1), (0, 1), ()))
    assert operators.op_bytes_and_flops(broadcast_add)[0] == (800 + 100 + 800) * 4


def test_a_row_lookup_moves_only_the_rows_it_selects() -> None:
    # an embedding table of 30522 x 384 fp32 (47 MB), 128 token ids: 128 rows read and written
    lookup = op("aten::index_select", 0, 10, shapes=((30522, 384), (), (128,)),
                dtypes=("float", "Scalar", "long int"))
    b, f = operators.op_bytes_and_flops(lookup)
    assert b == 128 * 8 + 2 * 128 * 384 * 4 and f == 0
    embedding = op("aten::embedding", 0, 10, shapes=((30522, 384), (1, 128), (), (), ()),
                   dtypes=("float", "long int", "Scalar", "Scalar", "Scalar"))
    assert operators.op_bytes_and_flops(embedding)[0] == b


def test_roofline_classifies_compute_bandwidth_and_overhead() -> None:
    ops = [gemm(0, 4000), elementwise(4000, 5000), op("aten::add", 9000, 5, shapes=((8,), (8,)),
                                                       dtypes=("float", "float"))]
    a = operators.analyze(trace(ops), CEILINGS)
    by = {o.name: o for o in a.operators}
    assert a.operators[0].name == "aten::mul"  # sorted by self time
    assert a.ridge_intensity == pytest.approx(10.0)
    assert by["aten::addmm"].bound == operators.COMPUTE
    # 134 MFLOP in 4 ms = 33.5 GFLOP/s of a 100 GFLOP/s peak
    assert by["aten::addmm"].pct_of_peak == pytest.approx(2 * 256 * 512 * 512 / 0.004 / 100e9)
    assert by["aten::mul"].bound == operators.BANDWIDTH
    assert by["aten::mul"].pct_of_peak == pytest.approx(2 * 4 * (4 << 20) / 0.005 / 10e9)
    assert by["aten::add"].bound == operators.OVERHEAD
    assert a.share_by_bound[operators.COMPUTE] == pytest.approx(0.4)
    assert a.share_by_bound[operators.BANDWIDTH] == pytest.approx(0.5)


def test_a_run_of_elementwise_operators_of_one_size_is_found_with_its_traffic_eager_and_fused() -> None:
    """`sigmoid(relu(x * 2 + y) * 3)` on 16 MiB: mul, add (a second tensor y), relu (which calls clamp_min), mul,
    sigmoid move 11 passes over the tensor eager; fused they read x and y and write the result: 3. A matrix product
    ends the run, and a lone mul after it is no run."""
    n = 4 << 20
    full, one = ((n,), ()), ("float", "Scalar")
    ops = [op("aten::mul", 0, 1000, shapes=full, dtypes=one),
           op("aten::view", 1000, 5, shapes=((n,),), dtypes=("float",)),
           op("aten::add", 1100, 1000, shapes=((n,), (n,), ()), dtypes=("float", "float", "Scalar")),
           op("aten::relu", 2200, 1000, self_us=5, leaf=False, shapes=((n,),), dtypes=("float",)),
           op("aten::clamp_min", 2203, 995, depth=1, shapes=full, dtypes=one),
           op("aten::mul", 3300, 1000, shapes=full, dtypes=one),
           op("aten::sigmoid", 4400, 1000, shapes=((n,),), dtypes=("float",)),
           gemm(5500, 1000, m=1, k=2048, n=2048),
           op("aten::mul", 6600, 1000, shapes=full, dtypes=one)]
    chains = operators.analyze(trace(ops), CEILINGS).elementwise_chains
    assert chains is not None
    assert (chains.runs_per_step, chains.longest_ops) == (1, 5)
    assert chains.tensor_bytes == 4 * n
    assert (chains.eager_passes, chains.fused_passes) == pytest.approx((11, 3))
    assert (chains.eager_bytes, chains.fused_bytes) == pytest.approx((11 * 4 * n, 3 * 4 * n))
    assert chains.time_s == pytest.approx(0.004995)  # clamp_min does relu's work; relu's own 5 us is its call
    # between the operators: 100 us, 100 (the view's 5 us included), 105 (relu's tail after clamp_min), 100
    assert chains.gap_s == pytest.approx(0.000405)
    # operators of two sizes in a row are no run of one tensor's size
    other = [op("aten::mul", 0, 1000, shapes=full, dtypes=one),
             op("aten::mul", 1100, 1000, shapes=((2 * n,), ()), dtypes=one)]
    assert operators.analyze(trace(other), CEILINGS).elementwise_chains is None


def test_a_bound_s_share_of_the_step_is_taken_step_by_step_and_stays_within_it() -> None:
    """Per-operator medians of different steps summed to more than the step: a noisy bandwidth-bound example read
    'explains 103% of the step'. Steps of 10, 10 and 30 ms; mul and add take turns being slow."""
    from dlperf.profile.trace import StepWindow

    walls_us = (10_000.0, 10_000.0, 30_000.0)
    starts = (0.0, 10_000.0, 20_000.0)
    mul_us, add_us = (9_000.0, 1_000.0, 15_000.0), (1_000.0, 9_000.0, 15_000.0)
    ops = [o for i in range(3) for o in (
        elementwise(starts[i], mul_us[i], step=i),
        replace(elementwise(starts[i] + mul_us[i], add_us[i], step=i), name="aten::add"))]
    t = trace(ops, steps=3)
    t.steps = [StepWindow(index=i, start_us=starts[i], end_us=starts[i] + walls_us[i], wall_s=walls_us[i] * 1e-6,
                          phase_us={"forward": walls_us[i]}) for i in range(3)]
    a = operators.analyze(t, CEILINGS)
    by = {o.name: o for o in a.operators}
    assert by["aten::mul"].share == pytest.approx(0.9) and by["aten::add"].share == pytest.approx(0.9)
    # the steps' bandwidth-bound time is 10, 10 and 30 ms: a median of 10 ms, the whole 10 ms median step
    assert a.share_by_bound[operators.BANDWIDTH] == pytest.approx(1.0)


def test_small_low_intensity_op_is_cache_resident() -> None:
    a = operators.analyze(trace([elementwise(0, 500, numel=1024)]), CEILINGS)
    assert a.operators[0].bound == operators.CACHE_RESIDENT


def test_on_cuda_the_cache_is_the_devices_l2() -> None:
    """An elementwise op moving 8 MiB per call: DRAM-bound against a CPU core's cache, in the L2 of a GPU that
    has 50 MB of it (the capture records the device's L2 size in the trace)."""
    from dataclasses import replace as dc_replace

    mul = dc_replace(elementwise(0, 500, numel=1 << 20), device_us=500.0)  # 4 MiB in, 4 MiB out
    t = trace([mul])
    assert operators.analyze(t, CEILINGS).operators[0].bound == operators.BANDWIDTH
    t.device = "cuda"
    assert operators.analyze(t, CEILINGS).operators[0].bound == operators.BANDWIDTH  # L2 size not known
    t.cache_bytes = 50_000_000
    assert operators.analyze(t, CEILINGS).operators[0].bound == operators.CACHE_RESIDENT
    assert t.summary()["cache_bytes"] == 50_000_000


def test_roofline_rejects_bad_ceilings() -> None:
    with pytest.raises(ProfileError, match="ceilings"):
        operators.analyze(trace([gemm(0, 10)]), FakeCeilings({"fp32": 0.0}, 1e9))


def test_memory_headroom_and_step_peak() -> None:
    t = trace([op("aten::empty", 0, 10, mem=300), op("aten::mul", 20, 10, mem=200),
               op("aten::add", 40, 10, mem=-400)], mem=mem_info(peak=900, budget=1000))
    t.memory.timeline = [(10.0, 300), (30.0, 500), (50.0, 100)]
    m = memory.analyze(t)
    assert m.used_fraction == pytest.approx(0.9)
    assert m.headroom_bytes == 100
    assert m.step_allocated_peak_bytes == 500
    assert [x.bytes for x in m.largest_allocations] == [300, 200]


def test_threads_oversubscription_and_other_load() -> None:
    th = threads.analyze(trace([op("aten::add", 0, 10)], thread_info=thread_info(intra=16, usable=2,
                                                                                 process_pct=50, system_pct=100)))
    assert th.oversubscription == 8.0
    assert th.other_busy_cores == pytest.approx(1.5)
    assert any("16 intra-op threads" in i for i in th.issues)
    calm = threads.analyze(trace([op("aten::add", 0, 10)]))
    assert calm.oversubscription == 1.0 and calm.issues == []


def test_loader_analysis_needs_a_training_trace_and_suggests_workers() -> None:
    with pytest.raises(ProfileError, match="--train"):
        dataloader.analyze(trace([op("aten::add", 0, 10)]))
    info = LoaderInfo("DataLoader", True, num_workers=0, pin_memory=False, prefetch_factor=None,
                      persistent_workers=False, batch_size=16)
    t = trace([op("aten::add", 0, 10)], mode=TRAIN, data_wait_s=0.006, loader=info)
    ld = dataloader.analyze(t)
    assert ld.wait_share == pytest.approx(0.6)
    assert ld.compute_s == pytest.approx(0.004)
    assert ld.suggested == {"num_workers": 2, "persistent_workers": True}
    assert dataloader.suggested_workers(2, 4) == 8
    # 16 workers (the most proposed) were proposed to a loader running 16, and 16 to one running 12
    assert dataloader.suggested_workers(2, 16) is None and dataloader.suggested_workers(2, 32) is None
    assert dataloader.suggested_workers(2, 12) == 16


def test_breakdown_reports_the_median_step_whole() -> None:
    t = trace([op("aten::mm", 0, 5000), op("aten::mm", 10_000, 5000, step=1), op("aten::mm", 20_000, 5000, step=2)],
              steps=3)
    t.steps = [replace(s, wall_s=wall) for s, wall in zip(t.steps, (0.010, 0.030, 0.020), strict=True)]
    b = breakdown.analyze(t)
    assert b.step_s == pytest.approx(0.020)  # the median step, not a mix of medians
    # its profiler range (10 ms) is rescaled to its wall time (20 ms): operators 10 ms, overhead 10 ms
    assert b.operator_s == pytest.approx(0.010)
    assert b.framework_overhead_s == pytest.approx(0.010)
    assert b.operator_s + b.framework_overhead_s == pytest.approx(b.step_s)


def test_cuda_operators_are_timed_by_their_kernels_and_the_sync_wait_is_not_overhead() -> None:
    """A CUDA step of 10 ms: the host launches a GEMM (8 µs on the host, 4 ms of kernel), a view (no kernel) and an
    add (6 µs host, 5 µs kernel), then waits 9 ms in cudaDeviceSynchronize. The roofline reads kernel time, the
    wait is neither operator time nor framework overhead."""
    from dataclasses import replace as dc_replace

    ops = [dc_replace(gemm(0, 8), device_us=4000.0), op("aten::view", 10, 2),
           dc_replace(op("aten::add", 20, 6, shapes=((8,), (8,)), dtypes=("float", "float")), device_us=5.0)]
    t = trace(ops)
    t.device = "cuda"
    t.steps = [dc_replace(t.steps[0], device_sync_us=9000.0)]
    a = operators.analyze(t, CEILINGS)
    by = {o.name: o for o in a.operators}
    assert set(by) == {"aten::addmm", "aten::add"}  # the view launched nothing
    assert by["aten::addmm"].self_s == pytest.approx(0.004)
    assert by["aten::addmm"].pct_of_peak == pytest.approx(2 * 256 * 512 * 512 / 0.004 / 100e9)
    assert by["aten::add"].bound == operators.OVERHEAD  # a 5 µs kernel
    assert a.share_by_bound[operators.COMPUTE] == pytest.approx(0.4)

    b = breakdown.analyze(t)
    assert b.device_sync_s == pytest.approx(0.009)
    assert b.operator_s == pytest.approx(16e-6)
    assert b.framework_overhead_s == pytest.approx(0.010 - 0.009 - 16e-6)
    la = launch.analyze(t)
    assert la.gap_time_s == pytest.approx(0.010 - 0.009 - 16e-6)
    assert la.overhead_share < 0.15  # a device-bound step is not a launch-overhead one

    cpu = breakdown.analyze(trace(ops))  # on the CPU there is no device wait to report
    assert cpu.device_sync_s is None and cpu.framework_overhead_s == pytest.approx(0.010 - 16e-6)


def test_a_convolution_writes_the_output_its_flops_imply_not_its_inputs_size() -> None:
    """A ResNet stem conv (3x224x224 in, 64 channels of 112x112 out, 7x7 stride 2) writes 4.3x its input: counted as
    its input's size, its bytes read low and its FLOP/byte high."""
    out = 64 * 112 * 112
    flops = 2 * out * 3 * 7 * 7
    conv = op("aten::mkldnn_convolution", 0, 100, flops=flops, shapes=((1, 3, 224, 224), (64, 3, 7, 7), (64,)),
              dtypes=("float", "float", "float"))
    b, f = operators.op_bytes_and_flops(conv)
    assert f == flops
    assert b == (3 * 224 * 224 + 64 * 3 * 7 * 7 + 64 + out) * 4
    # grouped (depthwise): 32 channels, 3x3, stride 1, padding 1
    dw = op("aten::mkldnn_convolution", 0, 100, flops=2 * 32 * 56 * 56 * 1 * 3 * 3,
            shapes=((1, 32, 56, 56), (32, 1, 3, 3), (32,)), dtypes=("float", "float", "float"))
    assert operators.op_bytes_and_flops(dw)[0] == (2 * 32 * 56 * 56 + 32 * 9 + 32) * 4


def _stalled_steps() -> ProfileTrace:
    """Three steps of 200 `add` calls of 5 µs, 10 µs apart (1 ms of calls, 1 ms of gaps); in steps 0 and 2 the
    process is descheduled for 8 ms inside the 101st call, so those steps take 10 ms and the middle one 2 ms."""
    ops, windows, start = [], [], 0.0
    for step, stall in enumerate((8000.0, 0.0, 8000.0)):
        for i in range(200):
            ops.append(op("aten::add", start + i * 10.0 + (stall if i > 100 else 0.0),
                          5.0 + (stall if i == 100 else 0.0), step=step))
        end = start + 2000.0 + stall
        windows.append(StepWindow(index=step, start_us=start, end_us=end, wall_s=(end - start) * 1e-6,
                                  phase_us={"forward": end - start}))
        start = end
    base = trace([], steps=1)
    return replace(base, steps=windows, ops=ops, unprofiled_step_s=[0.002] * 3)


def test_a_call_descheduled_mid_step_is_its_own_part_not_operators_or_dispatch() -> None:
    """A launch-bound model (200 x sin(x*w+0.1) on [1, 8]) on a busy machine read "of which operators 5.24 ms (82%)"
    beside self times adding up to 1.2 ms and "tiny ops + gaps = 35%": the median step (by wall) held one call of
    several ms, the process descheduled inside it, which the breakdown counted as operators' time and the dispatch
    share as neither tiny operators nor gaps, but as step."""
    t = _stalled_steps()
    b = breakdown.analyze(t)
    assert b.step_s == pytest.approx(0.010)  # the median step is a stalled one
    assert b.stalled_op_s == pytest.approx(0.008)
    assert b.operator_s == pytest.approx(0.001) and b.framework_overhead_s == pytest.approx(0.001)
    from rich.console import Console

    from dlperf.report.profile_view import _breakdown

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(_breakdown(b.to_dict()))
    rows = console.export_text()
    assert [" ".join(line.split()) for line in rows.splitlines() if "of which" in line] == [
        "of which operators 1.00 ms 10%", "of which operator calls stalled (descheduled) 8.00 ms 80%",
        "of which framework overhead 1.00 ms 10%"]
    la = launch.analyze(t)
    assert la.overhead_share == pytest.approx(1995 / 2000)  # of the step less its stall: 199 tiny calls + 1 ms gaps
    # an unstalled trace has no stalled part, and its share is as before
    calm = launch.analyze(trace([op("aten::add", i * 10.0, 5.0) for i in range(200)], step_us=2000.0))
    assert calm.overhead_share == pytest.approx(1.0)
    assert breakdown.analyze(trace([op("aten::add", i * 10.0, 5.0) for i in range(200)], step_us=2000.0)
                             ).stalled_op_s == 0.0
