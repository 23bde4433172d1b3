from __future__ import annotations

import dataclasses

import pytest

from dlperf.profile import diagnose as dg
from dlperf.profile.capture import StepOptions
from dlperf.profile.fixes import (
    batch_fix,
    bf16_fix,
    channels_last_fix,
    compile_fix,
    loader_fix,
    threads_fix,
)
from dlperf.profile.trace import TRAIN, LoaderInfo, OpEvent, ProfileTrace
from dlperf.profile.verify import choose_fixes
from tests.unit.profile.builders import (
    CEILINGS,
    elementwise,
    gemm,
    memory,
    op,
    threads,
    trace,
)

pytestmark = pytest.mark.unit


def _diagnose(t: object) -> dg.Diagnosis:
    return dg.diagnose(dg.analyze_all(t, CEILINGS))  # type: ignore[arg-type]


def test_gemm_step_is_compute_bound_with_evidence() -> None:
    d = _diagnose(trace([gemm(0, 9000)]))
    top = d.top
    assert top is not None and top.category == dg.COMPUTE_BOUND
    assert top.share == pytest.approx(0.9)
    assert any("aten::addmm" in e for e in top.evidence)
    assert d.verdict.startswith("compute")
    assert [f.id for f in top.fixes] == ["compile", "bf16"]


def test_elementwise_step_is_bandwidth_bound() -> None:
    d = _diagnose(trace([elementwise(i * 2000.0, 1900.0) for i in range(5)]))
    assert d.top is not None and d.top.category == dg.MEMORY_BANDWIDTH
    assert d.top.fixes[0].id == "compile"


def test_matrix_products_bound_by_their_weights_at_a_small_batch_are_told_to_batch() -> None:
    """Batch 1 of a 2048-wide MLP (addmm at 0.5 FLOP/B): the fixes proposed were compile and bf16 autocast, which
    measured 0.22x and 0.19x (bf16 converts the weights each call); a 4x batch is 2x per item, 16x is 7x."""
    d = _diagnose(trace([gemm(i * 2200.0, 2000.0, m=1, k=2048, n=2048) for i in range(4)]))
    top = d.top
    assert top is not None and top.category == dg.MEMORY_BANDWIDTH
    assert [f.id for f in top.fixes] == ["batch", "compile"]
    assert "batch more items per call" in top.fix
    assert any(e.startswith("matrix products are 100% of that time: at batch 8") for e in top.evidence)
    # elementwise traffic keeps the fusion advice; so does training, whose batch is the user's to choose
    assert _diagnose(trace([elementwise(i * 2000.0, 1900.0) for i in range(5)])).top.fixes[0].id == "compile"  # type: ignore[union-attr]
    train = _diagnose(trace([gemm(i * 2200.0, 2000.0, m=1, k=2048, n=2048) for i in range(4)], mode=TRAIN))
    assert all(f.id != "batch" for f in train.findings[0].fixes)


def test_bandwidth_evidence_leaves_out_operators_under_1pct_and_says_when_data_came_from_cache() -> None:
    """'aten::sum: 0% of the step, 0.0 FLOP/B ..., 280% of its roofline ceiling' was quoted as evidence."""
    ops = [elementwise(i * 2000.0, 1900.0) for i in range(5)]
    ops.append(op("aten::sum", 11_000.0, 40.0, shapes=((4 << 20,),), dtypes=("float",)))
    d = _diagnose(trace(ops))
    top = d.top
    assert top is not None and top.category == dg.MEMORY_BANDWIDTH
    assert not any(e.startswith("aten::sum") for e in top.evidence)
    fast = _diagnose(trace([elementwise(i * 2000.0, 100.0) for i in range(5)], step_us=1_000.0))
    quoted = [e for e in fast.findings[0].evidence if e.startswith("aten::mul")]
    assert quoted and "(above the memory bandwidth: its data came from the cache)" in quoted[0]


def test_matrix_products_inside_linear_are_the_products_not_parts_of_one() -> None:
    """On the CPU Linear records aten::linear with its addmm inside: the addmm is the product whose weight reads bound
    a small batch, not an operator nested in one, so its time stays in the bandwidth finding (and its batch advice)."""
    ops = []
    for i in range(4):
        start = i * 2200.0
        linear = op("aten::linear", start, 2010.0, self_us=10.0, leaf=False)
        # the profiler's microseconds often give both one start: the product was then read as nested in linear
        addmm = dataclasses.replace(gemm(start + (5.0 if i % 2 else 0.0), 2000.0, m=1, k=2048, n=2048), depth=1)
        ops += [linear, addmm]
    top = _diagnose(trace(ops)).top
    assert top is not None and top.category == dg.MEMORY_BANDWIDTH
    assert [f.id for f in top.fixes] == ["batch", "compile"]
    assert not any(e.startswith("not counted") for e in top.evidence)


def test_a_copy_nested_in_a_matrix_product_is_not_offered_elementwise_fusion() -> None:
    """An MLP of Linear layers at batch 512: the bias copy_ inside each addmm (`out.copy_(bias.expand(...))`) counted
    among the memory-bound operators, and the finding offered "fuse chains of elementwise operators (torch.compile)",
    which cannot fuse into the GEMM's call. Those are left out; a real elementwise operator beside them is not."""
    addmm = dataclasses.replace(gemm(0, 6000, m=512, k=2048, n=2048), self_us=3000.0, is_leaf=False)
    bias = op("aten::copy_", 100, 3000, depth=1, shapes=((512, 2048), (512, 2048)), dtypes=("float", "float"))
    d = _diagnose(trace([addmm, bias]))
    assert all(f.category != dg.MEMORY_BANDWIDTH for f in d.findings)
    mul = elementwise(6100, 3000)
    found = next(f for f in _diagnose(trace([addmm, bias, mul])).findings if f.category == dg.MEMORY_BANDWIDTH)
    assert found.share == pytest.approx(0.3)
    assert not any(e.startswith("aten::copy_") for e in found.evidence)
    assert any(e.startswith("aten::mul") for e in found.evidence)
    assert any(e.startswith("not counted: 30% of the step in memory-bound operators nested inside matrix products")
               for e in found.evidence)
    # the same copy outside any product is still an operator of the finding
    alone = op("aten::copy_", 6100, 3000, shapes=((512, 2048), (512, 2048)), dtypes=("float", "float"))
    found = next(f for f in _diagnose(trace([addmm, alone])).findings if f.category == dg.MEMORY_BANDWIDTH)
    assert any(e.startswith("aten::copy_") for e in found.evidence)


def test_fusing_a_run_of_elementwise_operators_is_estimated_from_its_traffic_eager_and_fused() -> None:
    """5 elementwise operators in a row on 128 MiB (`sigmoid(relu(x * 2 + 1) * 3)`) move about 10 passes eager and 2
    fused: "a fused chain halves traffic" estimated 1.73x, and torch.compile measured 4.58x. Operators of alternating
    sizes form no run, and keep that rule."""
    run = [elementwise(i * 2000.0, 1900.0, numel=32 << 20) for i in range(5)]
    found = _diagnose(trace(run)).top
    # the operators' 95% and the 4 gaps of 100 us between them, 4%, which fusing removes as well
    assert found is not None and found.category == dg.MEMORY_BANDWIDTH and found.share == pytest.approx(0.99)
    # 4 of the 5 operators' 2 passes go: 0.95 x 0.8 of the step, and the gaps
    assert found.estimated_speedup == pytest.approx(1 / (1 - 0.95 * 0.8 - 0.04))
    assert any(e.startswith("5 elementwise operators on 128 MiB tensors in a row: about 10 passes over such a tensor "
                            "eager, 2 fused, and 4% of the step between them") and "upper bound" in e
               for e in found.evidence)
    apart = [elementwise(i * 2000.0, 1900.0, numel=(32 if i % 2 else 16) << 20) for i in range(5)]
    found = _diagnose(trace(apart)).top
    assert found is not None and found.estimated_speedup == pytest.approx(1 / (1 - 0.95 / 2))
    assert not any("in a row" in e for e in found.evidence)


def test_the_time_between_a_run_s_elementwise_operators_is_estimated_to_go_with_fusing() -> None:
    """5 operators on 64 MiB whose gaps (freeing each intermediate, Python) were 24% of the step were estimated
    2.45x, "an upper bound on what fusing saves", and torch.compile measured 4.40x (CI 4.21-4.60x). Here 5 operators
    of 1.5 ms with 0.5 ms between them: 75% of the step in operators, 20% between them."""
    run = [elementwise(i * 2000.0, 1500.0, numel=16 << 20) for i in range(5)]
    found = _diagnose(trace(run)).top
    assert found is not None and found.category == dg.MEMORY_BANDWIDTH and found.share == pytest.approx(0.95)
    # 0.75 x 0.8 of the operators' time goes with their traffic, and all 0.2 between them: 5x, not 2.5x
    assert found.estimated_speedup == pytest.approx(1 / (1 - 0.75 * 0.8 - 0.2))
    assert any("and 20% of the step between them, outside every operator" in e for e in found.evidence)


def test_the_time_between_a_run_s_elementwise_operators_is_the_fusion_finding_s_not_a_per_call_cost() -> None:
    """5 operators on 64 MiB whose gaps were 24% of the step: the bandwidth finding counted that time as what fusing
    removes, and the per-call finding claimed it again as "a cost per call ... a larger batch amortizes it", proposing
    --batch-size for it. Here 5 operators of 1.1 ms with 0.5 ms between them (20%) and 2.5 ms after the last (25%)."""
    run = [elementwise(i * 1600.0, 1100.0, numel=16 << 20) for i in range(5)]
    d = _diagnose(trace(run))
    bandwidth = next(f for f in d.findings if f.category == dg.MEMORY_BANDWIDTH)
    overhead = next(f for f in d.findings if f.category == dg.LAUNCH_OVERHEAD)
    assert bandwidth.share == pytest.approx(0.75)  # the operators' 55% and the 20% between them
    assert overhead.share == pytest.approx(0.25) and "per-call" in overhead.title  # the 2.5 ms after them only
    assert overhead.estimated_speedup == pytest.approx(1 / (0.75 + 0.25 / 4))
    assert overhead.evidence[0].startswith("25% of the step is outside the operators' work: tiny operators (0.00 ms) "
                                           "and gaps between operators (2.50 ms)")
    assert any(e.startswith("not counted here: 20% of the step between the operators of runs of elementwise "
                            "operators") for e in overhead.evidence)
    # gaps only between the run's operators: no overhead finding at all
    run = [elementwise(i * 2000.0, 1500.0, numel=16 << 20) for i in range(5)]
    assert [f.category for f in _diagnose(trace(run)).findings] == [dg.MEMORY_BANDWIDTH]


@pytest.mark.parametrize(("ops", "fused_gap", "overhead_share"), [
    # the fusion finding counts the 20% between the run's operators; the dispatch finding the 25% after them
    ([elementwise(i * 1600.0, 1100.0, numel=16 << 20) for i in range(5)], 0.20, 0.25),
    # the run's operators are 15% of the step, under MIN_SHARE: no bandwidth finding, so the 20% between them is the
    # dispatch finding's, with the 65% after them
    ([elementwise(i * 800.0, 300.0, numel=16 << 20) for i in range(5)], 0.0, 0.85),
    # matrix products bound by their weights: that finding counts no gaps, so the 12% between the elementwise run's
    # operators is the dispatch finding's
    ([gemm(i * 2200.0, 2000.0, m=1, k=2048, n=2048) for i in range(3)]
     + [elementwise(6600.0 + i * 400.0, 100.0, numel=16 << 20) for i in range(5)], 0.0, 0.35),
], ids=["fusion", "under-min-share", "weights-bound"])
def test_the_time_between_a_run_s_operators_is_counted_once_by_the_bandwidth_or_the_dispatch_finding(
        ops: list[OpEvent], fused_gap: float, overhead_share: float) -> None:
    """The dispatch finding leaves out the time between a run's elementwise operators only where the bandwidth finding
    counts it (its fusion estimate): it repeated that finding's conditions, which could drift apart, and then that
    time would be counted twice or by neither."""
    d = _diagnose(trace(ops))
    overhead = next(f for f in d.findings if f.category == dg.LAUNCH_OVERHEAD)
    bandwidth = [f for f in d.findings if f.category == dg.MEMORY_BANDWIDTH]
    counted = [e for f in bandwidth for e in f.evidence if "of the step between them, outside every operator" in e]
    left_out = [e for e in overhead.evidence if e.startswith("not counted here: ") and "elementwise" in e]
    assert bool(counted) == bool(left_out) == (fused_gap > 0)
    if fused_gap:
        assert f"and {fused_gap:.0%} of the step between them" in counted[0]
        assert left_out[0].startswith(f"not counted here: {fused_gap:.0%} of the step between the operators")
    assert overhead.share == pytest.approx(overhead_share)
    assert overhead.share + fused_gap == pytest.approx(dg.analyze_all(trace(ops), CEILINGS).launch.overhead_share)


def test_bandwidth_far_below_the_measured_bandwidth_is_not_confidently_bandwidth_bound() -> None:
    """mlp(hidden=2048) at batch 256 on a busy machine: clamp_min and copy_ moved 0.27 and 0.40 of 22.4 GB/s (1-2%)
    and read 'the step is memory-bandwidth-bound', confidence medium, with fusion promised 1.28x."""
    slow = [elementwise(i * 20_000.0, 19_000.0, numel=1 << 20) for i in range(5)]  # 8 MiB in 19 ms: 4% of 10 GB/s
    d = _diagnose(trace(slow, step_us=100_000.0))
    found = [f for f in d.findings if f.category == dg.MEMORY_BANDWIDTH]
    assert len(found) == 1 and found[0].confidence == "low" and "far below" in found[0].title
    assert any("not limited by it" in e for e in found[0].evidence)
    fast = _diagnose(trace([elementwise(i * 2000.0, 1900.0) for i in range(5)]))
    assert fast.top is not None and fast.top.title == "the step is memory-bandwidth-bound"
    assert fast.top.confidence == "high"


def test_a_python_loop_over_the_batch_rows_is_told_to_vectorise_not_to_batch() -> None:
    """A forward looping over its batch's rows with .item(): 1538 operators per step at batch 256, so a 4x batch
    adds as many (0.95x measured) and compile breaks at each read (1.07x); both were verified, 'the estimate did not
    hold', and the right diagnosis was demoted. A vectorised rewrite gave 34.9x."""
    ops = []
    for i in range(300):
        ops.append(op("aten::item", i * 30.0, 4.0))
        ops.append(op("aten::_local_scalar_dense", i * 30.0 + 5, 3.0))
        ops.append(op("aten::mul", i * 30.0 + 10, 4.0))
    d = _diagnose(trace(ops, step_us=10_000.0))
    top = d.top
    assert top is not None and top.category == dg.LAUNCH_OVERHEAD
    assert top.fixes == [] and top.fix.startswith("vectorise the Python loop over the batch's rows")
    assert any(e.startswith("300 reads of a tensor's value into Python per step") for e in top.evidence)
    # at batch 1 there are no rows to loop over: the reads are not called one
    one = trace(ops, step_us=10_000.0)
    one.batch_size = 1
    single = _diagnose(one).top
    assert single is not None and single.fixes and not single.fix.startswith("vectorise")


def test_reads_into_python_for_half_the_batch_s_rows_are_a_loop_over_them() -> None:
    """The rows rule takes a loop that reads a value for every second row (a mask, a per-row branch) as a loop over
    the rows: 300 reads per step at batch 512 is told to vectorise, not to batch or compile (each measured no faster
    on such a loop); at batch 1024 the 300 reads are too few for one."""
    ops = []
    for i in range(300):
        ops.append(op("aten::item", i * 30.0, 4.0))
        ops.append(op("aten::mul", i * 30.0 + 10, 4.0))
    half = trace(ops, step_us=10_000.0)
    half.batch_size = 512
    top = _diagnose(half).top
    assert top is not None and top.category == dg.LAUNCH_OVERHEAD and top.fix.startswith("vectorise")
    fewer = trace(ops, step_us=10_000.0)
    fewer.batch_size = 1024
    top = _diagnose(fewer).top
    assert top is not None and top.category == dg.LAUNCH_OVERHEAD and not top.fix.startswith("vectorise")


def test_reads_into_python_in_the_optimizer_step_are_not_a_loop_over_the_batch_rows() -> None:
    """Single-tensor Adam (foreach=False) reads each parameter's step count into Python: 402 reads a step for 402
    parameters at batch 32 were told "vectorise the Python loop over the batch's rows", a loop the model does not
    have. The same reads in the forward are still one."""
    def step(phase: str) -> list[OpEvent]:
        ops = []
        for i in range(402):
            ops.append(op("aten::item", i * 20.0, 4.0, phase=phase))
            ops.append(op("aten::add_", i * 20.0 + 5, 4.0, phase=phase))
        return ops

    in_optimizer = trace(step("optimizer"), mode=TRAIN, phase_us={"optimizer": 10_000.0})
    in_optimizer.batch_size = 32
    assert dg.analyze_all(in_optimizer, CEILINGS).launch.python_reads_per_step == 0
    top = _diagnose(in_optimizer).top
    assert top is not None and top.category == dg.LAUNCH_OVERHEAD and not top.fix.startswith("vectorise")
    in_forward = trace(step("forward"), mode=TRAIN)
    in_forward.batch_size = 32
    top = _diagnose(in_forward).top
    assert top is not None and top.fix.startswith("vectorise")


def _optimizer_step(names: tuple[str, ...], params: int = 200, share: float = 0.6) -> ProfileTrace:
    """A training step of 10 ms: a forward GEMM, then an optimizer step of `share` running `names` for each of
    `params` parameters, back to back."""
    optimizer_us = 10_000.0 * share
    ops = [gemm(0, 10_000.0 - optimizer_us - 100)]
    per_op = optimizer_us / (params * len(names))
    start = 10_000.0 - optimizer_us
    for i in range(params * len(names)):
        ops.append(op(names[i % len(names)], start + i * per_op, per_op * 0.8, phase="optimizer"))
    return trace(ops, mode=TRAIN, phase_us={"forward": 10_000.0 - optimizer_us, "optimizer": optimizer_us})


def test_an_optimizer_step_that_updates_each_parameter_alone_is_told_to_use_fused_or_foreach() -> None:
    """Adam with foreach=False on a 200-layer MLP: its optimizer step was 54% of the training step, 3618 small
    operators, and no finding named it (the verdict was 'a Python loop over the batch's rows'); fused=True measured
    1.88x on the whole step. A step already running the fused or foreach implementation is not told so."""
    d = _diagnose(_optimizer_step(("aten::mul_", "aten::addcmul_", "aten::add_")))
    found = [f for f in d.findings if f.title == "the optimizer step updates its parameters one at a time"]
    assert len(found) == 1
    f = found[0]
    assert f.category == dg.LAUNCH_OVERHEAD and f.share == pytest.approx(0.6) and f.confidence == "high"
    assert [x.optimizer_impl for x in f.fixes] == ["fused", "foreach"]
    assert f.estimated_speedup == pytest.approx(1 / (0.4 + 0.6 / 4))
    assert f.evidence[0] == "the optimizer step takes 6.00 ms of the 10.00 ms step (60%)"
    assert f.evidence[1].startswith("it runs 600 operators a step from Python and none of them multi-tensor")
    fused = _diagnose(_optimizer_step(("aten::_fused_adam_",), params=1))
    assert not any(f.title.startswith("the optimizer step") for f in fused.findings)
    foreach = _diagnose(_optimizer_step(("aten::_foreach_mul_", "aten::_foreach_add_"), params=10))
    assert not any(f.title.startswith("the optimizer step") for f in foreach.findings)
    small = _diagnose(_optimizer_step(("aten::mul_", "aten::addcmul_", "aten::add_"), share=0.1))
    assert not any(f.title.startswith("the optimizer step") for f in small.findings)


def test_the_dispatch_finding_leaves_out_a_single_tensor_optimizer_step() -> None:
    """The optimizer's tiny operators were the dispatch finding's too: a training step read 97-100% and a
    torch.compile estimate of 3.99x, for operators compile of the model does not touch. With the optimizer finding,
    its share is taken out of the dispatch finding's (with a line saying so); without it, nothing changes."""
    dispatch = "the step is dominated by per-operator dispatch overhead"
    alone = _diagnose(_optimizer_step(("aten::mul_", "aten::addcmul_", "aten::add_")))
    assert not any(f.title == dispatch for f in alone.findings)  # 60% optimizer, 1% gap: nothing else to fuse
    ops = [op("aten::add", i * 10.0, 8.0, phase="forward") for i in range(300)]  # 30% of the step in the model
    per_op = 6000.0 / 600
    ops += [op(("aten::mul_", "aten::add_")[i % 2], 4000.0 + i * per_op, per_op * 0.8, phase="optimizer")
            for i in range(600)]
    both = _diagnose(trace(ops, mode=TRAIN, phase_us={"forward": 4000.0, "optimizer": 6000.0}))
    found = [f for f in both.findings if f.title == dispatch]
    assert len(found) == 1
    analyses = dg.analyze_all(trace(ops, mode=TRAIN, phase_us={"forward": 4000.0, "optimizer": 6000.0}), CEILINGS)
    assert analyses.launch.optimizer_overhead_share == pytest.approx(0.6)  # 8 µs operators and 2 µs gaps
    assert found[0].share == pytest.approx(analyses.launch.overhead_share - 0.6)
    assert "not counted here: the optimizer step's 60% of the step in tiny operators and gaps" in found[0].evidence[-1]
    fused = _diagnose(trace([*ops[:300], op("aten::_fused_adam_", 4000.0, 5000.0, phase="optimizer")], mode=TRAIN,
                            phase_us={"forward": 4000.0, "optimizer": 6000.0}))
    assert not any("not counted here" in e for f in fused.findings for e in f.evidence)


def test_a_quarter_of_the_step_in_compute_bound_operators_is_a_finding() -> None:
    """Any category that explains 20% of the step (MIN_SHARE) is a finding: a step 25% in GEMMs is named
    compute-bound (at medium confidence), one 15% in them is not."""
    quarter = _diagnose(trace([gemm(0, 2500)]))
    found = [f for f in quarter.findings if f.category == dg.COMPUTE_BOUND]
    assert len(found) == 1 and found[0].share == pytest.approx(0.25) and found[0].confidence == "medium"
    assert not any(f.category == dg.COMPUTE_BOUND for f in _diagnose(trace([gemm(0, 1500)])).findings)


def test_a_profiled_step_of_few_large_operators_far_slower_than_unprofiled_is_called_disturbed() -> None:
    """Two 1024-wide GEMMs profiled 1.67x slower than unprofiled (a busy spell): the caveat fired only at 3x, and
    '44% of peak: try torch.compile' was told of a step at 93% when measured quietly."""
    d = _diagnose(trace([gemm(0, 9000)], step_us=10_000.0, unprofiled_s=0.006))
    assert any(c.startswith("the profiled step took 1.67x the unprofiled one (4.00 ms more), far more than the "
                            "profiler costs its 1 operator (") for c in d.caveats), d.caveats
    many = _diagnose(trace([op("aten::add", i * 10.0, 4.0) for i in range(900)], step_us=10_000.0,
                           unprofiled_s=0.0075))
    assert not any("far more than the profiler costs" in c for c in many.caveats)  # 900 operators: 45 ms allowed


def test_many_tiny_ops_are_launch_overhead() -> None:
    d = _diagnose(trace([op("aten::add", i * 10.0, 4.0) for i in range(900)], step_us=10_000.0))
    assert d.top is not None and d.top.category == dg.LAUNCH_OVERHEAD
    assert [f.id for f in d.top.fixes] == ["batch", "compile"]
    assert d.top.estimated_speedup is not None and d.top.estimated_speedup > 1


def _fused_layers(layers: int = 2, inner: int = 800, inner_us: float = 4.0, item_depth: int = 3) -> list[OpEvent]:
    """A step as nn.TransformerEncoder's fast path runs it: one top-level operator a layer, holding `inner` nested
    operators of `inner_us` each (a few of them reads of a value, inside the nested-tensor softmax)."""
    ops: list[OpEvent] = []
    layer_us = inner * inner_us + 200.0
    for i in range(layers):
        start = 500.0 + i * (layer_us + 500.0)
        ops.append(op("aten::_transformer_encoder_layer_fwd", start, layer_us, self_us=200.0, leaf=False))
        for j in range(inner):
            name = "aten::item" if j % 100 == 0 else ("aten::select", "aten::copy_", "aten::slice")[j % 3]
            depth = item_depth if name == "aten::item" else 1
            ops.append(op(name, start + 100.0 + j * inner_us, inner_us, depth=depth))
    return ops


def test_many_tiny_operators_nested_in_a_few_large_ones_are_dispatch_overhead() -> None:
    """nn.TransformerEncoder's fast path: 21 top-level operators a step, 1729 in all, 55% of the step in operators
    under 20 µs a call, read 'no clear bottleneck' (the launch analysis counted only the top-level ones); compile
    measured 1.83x on it, a 4x batch 1.60x."""
    ops = _fused_layers()
    analyses = dg.analyze_all(trace(ops, step_us=8_000.0), CEILINGS)
    d = dg.diagnose(analyses)  # 6.4 ms of nested operators, 1.2 ms of gaps around the layers
    top = d.top
    assert top is not None and top.category == dg.LAUNCH_OVERHEAD and "per-operator dispatch" in top.title
    assert top.share == pytest.approx((6400.0 + 1200.0) / 8000.0)
    assert analyses.launch.overhead_share == pytest.approx(1200.0 / 8000.0)  # the top-level view alone: 15%
    assert top.evidence[0].startswith("1602 operators per step counting those nested in others (2 called from Python")
    assert "in operators shorter than 20 µs a call (aten::" in top.evidence[1]
    # the reads inside the fused operators are not a Python loop over the batch's rows (batch 8: 16 reads a step)
    assert [f.id for f in top.fixes] == ["batch", "compile"] and not top.fix.startswith("vectorise")
    # the same reads called from Python are one
    python_loop = _diagnose(trace(_fused_layers(item_depth=0), step_us=8_000.0)).top
    assert python_loop is not None and python_loop.fix.startswith("vectorise")
    # on CUDA an operator's time is its kernels' (beside the host's gaps): the nested rule does not apply
    assert dg._nested_dispatch(dataclasses.replace(analyses, device="cuda")) is None
    # many called from Python (a loop of small layers), each running a few nested ones: not "a few large ones"
    many = _diagnose(trace(_fused_layers(layers=120, inner=50, item_depth=1), step_us=120 * 900.0)).top
    assert many is not None and many.category == dg.LAUNCH_OVERHEAD
    assert many.evidence[0] == ("6120 operators per step counting those nested in others (120 called from Python: each "
                                "runs 51.0 on average, itself included)")


def test_waiting_for_data_ranks_first_as_root_cause() -> None:
    info = LoaderInfo("DataLoader", True, num_workers=0, pin_memory=False, prefetch_factor=None,
                      persistent_workers=False, batch_size=16)
    # Even a step whose remaining time is all GEMM: the data wait comes first.
    t = trace([gemm(5000, 4900)], mode=TRAIN, data_wait_s=0.005, loader=info,
              phase_us={"data": 5000, "forward": 5000})
    d = _diagnose(t)
    assert [f.category for f in d.findings][:2] == [dg.INPUT_PIPELINE, dg.COMPUTE_BOUND]
    top = d.findings[0]
    assert top.root_cause and top.fixes[0].id == "loader"
    # 5 ms load over 2 workers overlaps a 5 ms compute: the step could take 5 ms instead of 10
    assert top.estimated_speedup == pytest.approx(2.0)


@pytest.mark.parametrize(("wait_us", "confidence"), [(4500, "high"), (3500, "medium")])
def test_waiting_for_data_is_high_confidence_from_40pct_of_the_step(wait_us: int, confidence: str) -> None:
    """A step that waits 45% of its time for data is plainly input-bound; at 35% it is a medium-confidence finding."""
    info = LoaderInfo("DataLoader", True, num_workers=0, pin_memory=False, prefetch_factor=None,
                      persistent_workers=False, batch_size=16)
    t = trace([gemm(10_000 - wait_us, 10_000 - wait_us - 100)], mode=TRAIN, data_wait_s=wait_us / 1e6, loader=info,
              phase_us={"data": wait_us, "forward": 10_000 - wait_us})
    found = next(f for f in _diagnose(t).findings if f.category == dg.INPUT_PIPELINE)
    assert found.confidence == confidence


def test_oversubscribed_threads_outrank_the_compute_they_slow_down() -> None:
    d = _diagnose(trace([gemm(0, 9000)], thread_info=threads(intra=16, usable=2)))
    assert d.top is not None and d.top.category == dg.HOST_THREADS and d.top.root_cause
    assert d.top.fixes[0].threads == 2
    assert d.findings[1].category == dg.COMPUTE_BOUND


def test_memory_near_the_budget_ranks_first() -> None:
    d = _diagnose(trace([elementwise(0, 9000)], mem=memory(peak=950, budget=1000)))
    assert d.top is not None and d.top.category == dg.MEMORY_CAPACITY
    assert d.top.estimated_speedup is None and "out-of-memory" in d.top.estimated_gain


def test_another_busy_python_thread_is_reported() -> None:
    d = _diagnose(trace([op("aten::add", 0, 100)], thread_info=threads(other_python=0.9)))
    assert d.top is not None and d.top.category == dg.HOST_THREADS
    assert "another thread" in d.top.title


def test_no_clear_bottleneck_is_a_verdict() -> None:
    # 10 top-level medium ops in cache, covering the step: nothing explains 20% of it.
    ops = [op(f"aten::op{i}", i * 1000.0, 1000.0, shapes=((64,),), dtypes=("float",)) for i in range(10)]
    d = _diagnose(trace(ops))
    assert d.findings == []
    assert d.verdict.startswith("no clear bottleneck")


def test_fixes_change_step_options() -> None:
    base = StepOptions(threads=16)
    assert threads_fix(2).apply(base, 8).threads == 2
    assert (threads_fix(1).label, threads_fix(2).label) == ("1 intra-op thread", "2 intra-op threads")
    assert batch_fix(8, 4).apply(base, 8).batch_size == 32
    fixed = loader_fix({"num_workers": 2, "persistent_workers": True}).apply(base, 8)
    assert dict(fixed.loader_kwargs) == {"num_workers": 2, "persistent_workers": True}


def test_choose_fixes_skips_batch_in_training_and_dedups() -> None:
    d = _diagnose(trace([op("aten::add", i * 10.0, 4.0) for i in range(900)], step_us=10_000.0))
    t = trace([op("aten::add", 0, 1)])
    assert [f.id for _, f in choose_fixes(d, t, 2)] == ["batch", "compile"]
    t.mode = TRAIN
    assert [f.id for _, f in choose_fixes(d, t, 2)] == ["compile"]


def test_a_busy_machine_is_a_finding_and_a_caveat() -> None:
    starved = threads(intra=2, usable=2, process_pct=30.0, system_pct=100.0)
    d = _diagnose(trace([gemm(0, 9000)], thread_info=starved))
    # the GEMM runs at 15% of the peak: no stall measured, so the starved process alone is medium confidence
    assert d.top is not None and d.top.category == dg.COMPUTE_BOUND
    busy = [f for f in d.findings if f.category == dg.HOST_THREADS]
    assert len(busy) == 1 and busy[0].confidence == "medium" and not busy[0].root_cause
    # got 0.3 of 2 cores: 85% of the operators' 90% of the step was waiting to run
    assert busy[0].share == pytest.approx(0.85 * 0.9)
    assert busy[0].fixes[0].threads == 1
    assert len(d.caveats) == 1 and "machine was busy" in d.caveats[0]
    calm = _diagnose(trace([gemm(0, 9000)]))
    assert calm.caveats == [] and all(f.category != dg.HOST_THREADS for f in calm.findings)


def test_operators_above_the_ceiling_blame_the_ceilings() -> None:
    normal = _diagnose(trace([gemm(0, 9000)]))
    assert not any("calibrate --force" in c for c in normal.caveats)
    # the same GEMM (15% of the real peak) against ceilings a tenth of the real ones: "150% of peak"
    low = type(CEILINGS)({"fp32": CEILINGS.gemm_flops["fp32"] / 10}, CEILINGS.memory_bandwidth_bytes_s / 10)
    d = dg.diagnose(dg.analyze_all(trace([gemm(0, 9000)]), low))
    assert any("aten::addmm ran at" in c and "calibrate --force" in c for c in d.caveats)


def test_cuda_collectives_count_by_their_kernels() -> None:
    """On CUDA the host only enqueues an all-reduce (a few µs of c10d op); its NCCL kernel is what the step waits on."""
    from dataclasses import replace

    from dlperf.profile.trace import KernelEvent

    t = trace([op("c10d::allreduce_", 0, 5), replace(gemm(10, 8), device_us=5000.0)])
    t.device = "cuda"
    t.kernels = [KernelEvent("ampere_sgemm_128x64_nn", 20, 5000, 0),
                 KernelEvent("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5100, 4000, 0)]
    a = dg.analyze_all(t, CEILINGS)
    assert a.comm_share == pytest.approx(0.4)
    assert any(f.category == dg.COMMUNICATION for f in dg.diagnose(a).findings)


def _stalled_gemm_trace(process_pct: float, system_pct: float) -> object:
    # 134 MFLOP in 90 ms: 1.5 GFLOP/s, 1.5% of the 100 GFLOP/s peak, above the ridge (a compute-bound op)
    return trace([gemm(0, 90_000)], step_us=100_000.0,
                 thread_info=threads(intra=2, usable=2, process_pct=process_pct, system_pct=system_pct))


def test_compute_far_below_peak_is_not_confidently_compute_bound() -> None:
    d = _diagnose(_stalled_gemm_trace(190.0, 95.0))  # an idle machine: no other process busy
    compute = [f for f in d.findings if f.category == dg.COMPUTE_BOUND]
    assert len(compute) == 1 and compute[0].confidence == "low"
    assert "far below" in compute[0].title
    assert any("not limited by the arithmetic" in e for e in compute[0].evidence)
    assert all(f.category != dg.HOST_THREADS for f in d.findings)


def test_a_measured_stall_on_a_shared_machine_ranks_as_the_cause() -> None:
    # other processes keep 0.7 cores busy; 2 threads on 1.3 free cores; the GEMM runs at 1.5% of the peak
    d = _diagnose(_stalled_gemm_trace(130.0, 100.0))
    assert d.top is not None and d.top.title == dg.SHARED_MACHINE and d.top.confidence == "medium"
    assert d.top.share == pytest.approx(0.9)
    assert any("descheduled threads" in e for e in d.top.evidence)
    assert d.verdict.startswith(dg.HOST_THREADS)
    # starved as well (got 1.0 of 2 cores): both signals, a root cause
    both = _diagnose(_stalled_gemm_trace(100.0, 100.0))
    assert both.top is not None and both.top.title == dg.SHARED_MACHINE
    assert both.top.confidence == "high" and both.top.root_cause


def test_verify_measures_the_runner_up_fix_before_the_top_findings_second() -> None:
    gemm_trace = trace([gemm(0, 9000)])
    compute = dg.Finding(dg.COMPUTE_BOUND, "c", [], "", 0.8, "high",
                         fixes=[channels_last_fix(), compile_fix(), bf16_fix()])
    busy = dg.Finding(dg.HOST_THREADS, dg.SHARED_MACHINE, [], "", 0.5, "low", fixes=[threads_fix(1)])
    chosen = choose_fixes(dg.Diagnosis([compute, busy], "v"), gemm_trace, 2)
    assert [(f.category, fix.id) for f, fix in chosen] == [(dg.COMPUTE_BOUND, "channels_last"),
                                                          (dg.HOST_THREADS, "threads")]
    assert [fix.id for _, fix in choose_fixes(dg.Diagnosis([compute, busy], "v"), gemm_trace, 4)] == [
        "channels_last", "threads", "compile", "bf16"]


def test_overhead_in_a_step_of_few_operators_is_a_per_call_finding() -> None:
    # 12 operators of 300 µs cover 36% of a 10 ms step: 64% is gaps, the per-call cost of Python and dispatch
    ops = [op(f"aten::op{i}", i * 800.0, 300.0, shapes=((64,),), dtypes=("float",)) for i in range(12)]
    d = _diagnose(trace(ops))
    assert d.top is not None and d.top.category == dg.LAUNCH_OVERHEAD
    assert "per-call" in d.top.title and d.top.share == pytest.approx(0.64)
    assert any("only 12 operators per step" in e and "larger batch" in e for e in d.top.evidence)
    # one profile at one batch cannot show the cost stays flat with the batch (a QA run's "gaps" were frees of a
    # huge intermediate, 34 ms at batch 1, 68-81 ms at 4): the evidence says what would, not that it does
    assert not any("it does not grow with the batch" in e for e in d.top.evidence)
    assert any("--verify measures a 4x batch" in e for e in d.top.evidence)
    assert [f.id for f in d.top.fixes] == ["batch", "compile"]
    # in training --verify never measures a larger batch (choose_fixes skips it): the evidence does not promise it
    train = _diagnose(trace(ops, mode=TRAIN))
    assert train.top is not None and [f.id for f in train.top.fixes] == ["compile"]
    assert not any("--verify measures a 4x batch" in e for e in train.top.evidence)
    assert any("`dlperf train --batch-size N`" in e for e in train.top.evidence)


def test_gaps_of_a_process_starved_of_cores_are_a_low_confidence_per_call_finding() -> None:
    """Under load the compute-bound example's thread waited for a core between its 8 GEMMs, and '58% fixed
    per-call cost' (medium) outranked the GEMMs, 70% of the same step profiled alone: the gaps may be waiting."""
    gemms = [gemm(i * 1250.0, 450.0) for i in range(8)]  # 36% of the step; 64% between them
    alone = _diagnose(trace(gemms, thread_info=threads(intra=1, process_pct=100.0, system_pct=50.0)))
    overhead = next(f for f in alone.findings if f.category == dg.LAUNCH_OVERHEAD)
    assert overhead.confidence == "medium" and not any("waiting for a core" in e for e in overhead.evidence)
    # one thread, half a core got, 1.5 cores busy with other processes
    loaded = _diagnose(trace(gemms, thread_info=threads(intra=1, process_pct=50.0, system_pct=100.0)))
    overhead = next(f for f in loaded.findings if f.category == dg.LAUNCH_OVERHEAD)
    assert overhead.confidence == "low" and overhead.share == pytest.approx(0.64)
    assert any("got only 0.5 of the 1 core its step could use while other processes kept 1.5 busy: up to 50% of "
               "the step was waiting for a core" in e for e in overhead.evidence), overhead.evidence
    # a one-thread step that got its one core of two is not starved, however busy the other core was
    busy_other = _diagnose(trace(gemms, thread_info=threads(intra=1, process_pct=100.0, system_pct=100.0)))
    assert next(f for f in busy_other.findings if f.category == dg.LAUNCH_OVERHEAD).confidence == "medium"


def test_a_profiled_step_far_faster_than_unprofiled_is_a_caveat() -> None:
    d = _diagnose(trace([gemm(0, 9000)], unprofiled_s=0.35))  # profiled 10 ms, unprofiled 350 ms
    assert any("(10.00 ms) was 35x faster than the unprofiled one (350.00 ms)" in c and "not representative" in c
               for c in d.caveats), d.caveats
    # 'took 0.00x the unprofiled one' for a 10 ms step against a 20 s one
    far = _diagnose(trace([gemm(0, 9000)], unprofiled_s=20.0)).caveats
    assert any("was 2,000x faster than the unprofiled one" in c for c in far) and not any("0.00x" in c for c in far)
    assert dg.times_faster(0.4) == "2.5x"
    assert not any("unprofiled one" in c for c in _diagnose(trace([gemm(0, 9000)], unprofiled_s=0.008)).caveats)


def test_a_profiled_step_far_slower_than_the_profiler_explains_is_not_blamed_on_the_profiler() -> None:
    # profiled 10 ms: 5x the unprofiled 2 ms is the profiler's cost for 900 tiny operators (45 ms allowed) but not
    # for one GEMM; 100x (0.1 ms) is more than it explains
    tiny = [op("aten::add", i * 10.0, 4.0) for i in range(900)]
    slow = _diagnose(trace(tiny, step_us=10_000.0, unprofiled_s=0.002)).caveats
    assert any(c.startswith("the profiler slowed the step 5.0x") for c in slow), slow
    # zoo:minilm's 189 operators profiled 20x slower (248 against 12.4 ms) on a busy machine were "the profiler
    # slowed the step 20.0x"; one GEMM 5x slower (8 ms more) is as far past what one operator costs the profiler
    one = _diagnose(trace([gemm(0, 9000)], unprofiled_s=0.002)).caveats
    assert not any("the profiler slowed" in c for c in one), one
    assert any(c.startswith("the profiled step took 5.00x the unprofiled one (8.00 ms more), far more than the "
                            "profiler costs its 1 operator (") for c in one), one
    stalled = _diagnose(trace([gemm(0, 9000)], unprofiled_s=0.0001)).caveats
    assert not any("the profiler slowed" in c for c in stalled)
    assert any(c.startswith("the profiled step took 100.0x the unprofiled one, more than the profiler's own cost "
                            "explains (another process or a stall during the profiled steps") for c in stalled)
    # on a busy machine even a few-fold slowdown points at the contention the caveat above names
    starved = threads(intra=2, usable=2, process_pct=30.0, system_pct=100.0)
    busy = _diagnose(trace([gemm(0, 9000)], thread_info=starved, unprofiled_s=0.002)).caveats
    assert busy[0].startswith("the machine was busy")
    assert busy[1].startswith("the profiled step took 5.0x the unprofiled one") and "the busy machine above" in busy[1]


def test_the_data_wait_is_the_breakdowns_number() -> None:
    from dataclasses import replace

    info = LoaderInfo("DataLoader", True, num_workers=0, pin_memory=False, prefetch_factor=None,
                      persistent_workers=False, batch_size=16)
    t = trace([gemm(5000, 4000, step=i) for i in range(3)], steps=3, mode=TRAIN, loader=info,
              phase_us={"data": 1000, "forward": 4000})
    # walls 10, 12, 20 ms; waits 5, 4, 9 ms: the median wait (5) is not the median step's (4)
    t.steps = [replace(s, wall_s=w, data_wait_s=d) for s, w, d in zip(t.steps, (0.010, 0.012, 0.020),
                                                                         (0.005, 0.004, 0.009), strict=True)]
    a = dg.analyze_all(t, CEILINGS)
    assert a.loader is not None
    assert (a.loader.data_wait_s, a.loader.step_s) == (a.breakdown.data_wait_s, a.breakdown.step_s) == (0.004, 0.012)
    top = dg.diagnose(a).top
    assert top is not None and top.category == dg.INPUT_PIPELINE
    assert "(4.00 ms of 12.00 ms)" in top.evidence[0]


def test_a_busy_machine_explaining_under_the_minimum_share_is_no_finding() -> None:
    """A step mostly outside its operators (here 10% of it in one GEMM) on a busy machine: the starved process
    loses at most that 10%; reported as "explains 1%" before, under the 20% every finding needs."""
    starved = threads(intra=2, usable=2, process_pct=30.0, system_pct=100.0)
    d = _diagnose(trace([gemm(0, 1000)], thread_info=starved))
    assert all(f.category != dg.HOST_THREADS for f in d.findings)
    assert any("machine was busy" in c for c in d.caveats)  # still said, as a caveat
    quiet_thread = threads(other_python=0.3, usable=2)  # 0.3 of 2 cores: 15%
    assert all("another thread" not in f.title for f in _diagnose(trace([gemm(0, 9000)],
                                                                        thread_info=quiet_thread)).findings)


def test_oversubscription_says_its_share_is_a_rule_of_thumb() -> None:
    d = _diagnose(trace([gemm(0, 9000)], thread_info=threads(intra=8, usable=2)))
    over = next(f for f in d.findings if f.title.startswith("torch uses more threads"))
    assert any("rule of thumb" in e and "--verify measures" in e for e in over.evidence)
    assert "8 threads of this process were busy; together they kept 1.9 cores busy" in over.evidence
    one = dataclasses.replace(threads(intra=16, usable=2, process_pct=90.0), busy_threads=1)
    d = _diagnose(trace([gemm(0, 9000)], thread_info=one))
    over = next(f for f in d.findings if f.title.startswith("torch uses more threads"))
    assert "1 thread of this process was busy; it kept 0.9 cores busy" in over.evidence  # was '1 threads ... were'


def test_oversubscription_on_a_busy_machine_sets_the_threads_to_the_cores_other_processes_leave() -> None:
    """8 threads on 2 cores with another process on one of them were told `--threads 2` (beside the busy-machine
    finding's `--threads 1`), and --verify measured 2 threads 0.37x, slower: one of the two waits for the busy core
    at every parallel operator."""
    busy = threads(intra=8, usable=2, process_pct=100.0, system_pct=100.0)  # this process 1.0 core, others 1.0
    d = _diagnose(trace([gemm(0, 9000)], thread_info=busy))
    over = next(f for f in d.findings if f.title.startswith("torch uses more threads"))
    assert over.fixes[0].threads == 1 and over.setting == "--threads 1"
    assert "the 1 of the 2 usable cores that other processes leave free (they kept 1.0 busy)" in over.fix
    assert any(e.startswith("it assumes the cores are this process's: with other processes keeping 1.0 busy")
               for e in over.evidence)
    shared = next(f for f in d.findings if f.title == dg.SHARED_MACHINE)
    assert shared.fixes[0].threads == 1
    idle = _diagnose(trace([gemm(0, 9000)], thread_info=threads(intra=8, usable=2)))
    over = next(f for f in idle.findings if f.title.startswith("torch uses more threads"))
    assert over.fixes[0].threads == 2 and "to the 2 usable cores" in over.fix
    assert not any(e.startswith("it assumes the cores") for e in over.evidence)


def test_a_thread_count_the_workloads_step_sets_itself_gets_no_threads_setting() -> None:
    """A forward calling torch.set_num_threads(16) on 2 cores was told 'apply with: --threads 2', which the forward
    undoes at each step; only --verify said the fix did not hold. The fix is in the workload's code."""
    in_step = dataclasses.replace(threads(intra=16, usable=2), threads_set_by="step")
    over = next(f for f in _diagnose(trace([gemm(0, 9000)], thread_info=in_step)).findings
                if f.title.startswith("torch uses more threads"))
    assert over.setting is None and over.fixes == [] and over.root_cause
    assert "the fix is in the workload's code" in over.fix and "torch.set_num_threads" in over.fix
    assert any(e.startswith("the workload sets its own thread count: after each step torch had 16 threads")
               for e in over.evidence)
    assert not any("--verify measures" in e for e in over.evidence)
    one = dataclasses.replace(threads(intra=1, usable=2, process_pct=95.0, system_pct=47.5), threads_set_by="step")
    under = next(f for f in _diagnose(trace([gemm(0, 9000)], thread_info=one)).findings
                 if f.title == "torch uses fewer threads than there are free cores")
    assert under.setting is None and under.fixes == [] and "the workload's code" in under.fix
    # set by a model factory: dlperf's count, set before each step, overrides it, so --threads stays, said so
    built = dataclasses.replace(threads(intra=16, usable=2), threads_set_by="build")
    over = next(f for f in _diagnose(trace([gemm(0, 9000)], thread_info=built)).findings
                if f.title.startswith("torch uses more threads"))
    assert over.setting == "--threads 2" and [f.id for f in over.fixes] == ["threads"]
    assert any("when it builds its model" in e for e in over.evidence)


@pytest.mark.parametrize(("probed", "set_by", "said"), [(False, None, True), (True, None, False), (None, None, False),
                                                        (False, "step", False), (False, "build", True)])
def test_a_threads_fix_says_when_no_step_was_probed_for_a_count_of_its_own(probed: bool | None, set_by: str | None,
                                                                           said: bool) -> None:
    """With no warm-up step no step ran under another thread count, so a forward setting the count already in place
    read as setting none, and `--threads 1` was offered (which that forward undoes) without a word; an older trace
    (None) says nothing, nor a step seen setting its own count, which gets no --threads fix."""
    info = dataclasses.replace(threads(intra=4, usable=2), threads_probed=probed, threads_set_by=set_by)
    over = next(f for f in _diagnose(trace([gemm(0, 9000)], thread_info=info)).findings
                if f.title.startswith("torch uses more threads"))
    unprobed = [e for e in over.evidence if e.startswith("no step ran under another thread count")]
    assert bool(unprobed) == said
    if said:
        assert "would go unseen, and undo a --threads fix: --verify measures whether it holds" in unprobed[0]
    busy = dataclasses.replace(threads(intra=8, usable=2, process_pct=100.0, system_pct=100.0), threads_probed=probed,
                               threads_set_by=set_by)
    shared = next(f for f in _diagnose(trace([gemm(0, 9000)], thread_info=busy)).findings
                  if f.title == dg.SHARED_MACHINE)
    assert any(e.startswith("no step ran under another thread count") for e in shared.evidence) == said


def _waiting_loader_top(num_workers: int, persistent: bool, system_pct: float = 47.5,
                        core_share: float | None = None, workers_busy: float = 0.0) -> dg.Finding | None:
    """The top finding of a 40 ms training step that waits 30 ms for its loader's next batch (on 4 cores, others
    busy elsewhere at `system_pct` of the machine: 47.5 is this process's 1.9 cores alone; the loading on a core
    `core_share` of its time)."""
    from dataclasses import replace

    info = LoaderInfo("DataLoader", True, num_workers=num_workers, pin_memory=False, prefetch_factor=2,
                      persistent_workers=persistent, batch_size=16)
    t = trace([gemm(30_000, 9_000, step=i) for i in range(3)], steps=3, mode=TRAIN, loader=info,
              step_us=40_000.0, phase_us={"data": 30_000, "forward": 10_000},
              thread_info=threads(usable=4, system_pct=system_pct, workers=num_workers if workers_busy else 0,
                                  workers_busy=workers_busy))
    t.steps = [replace(s, data_wait_s=0.030) for s in t.steps]
    t.loader_core_share = core_share
    return dg.diagnose(dg.analyze_all(t, CEILINGS)).top


def test_a_worker_fed_step_is_judged_on_its_mean_not_its_bimodal_median() -> None:
    """2 workers with 10 ms of sleep per sample: a step either waits ~159 ms or finds a batch ready (~1 ms). The
    median of such steps read 'waits 5.42 ms of 6.83 ms' beside 'a batch takes about 159.79 ms to load (2 x the
    step)', and 'profiled 12x faster: the unprofiled timing was disturbed' of a right 80 ms mean."""
    from dataclasses import replace

    info = LoaderInfo("DataLoader", True, num_workers=2, pin_memory=False, prefetch_factor=2,
                      persistent_workers=True, batch_size=16)
    t = trace([gemm(i * 80_000.0, 500, step=i) for i in range(4)], steps=4, mode=TRAIN, loader=info,
              step_us=80_000.0, phase_us={"forward": 1_000}, thread_info=threads(usable=4), unprofiled_s=0.080)
    t.steps = [replace(s, wall_s=0.160 if s.index % 2 == 0 else 0.001,
                       data_wait_s=0.159 if s.index % 2 == 0 else 0.0) for s in t.steps]
    t.unprofiled_data_wait_s = [0.079] * 3
    a = dg.analyze_all(t, CEILINGS)
    assert a.loader is not None and a.loader.wait_share == pytest.approx(0.0795 / 0.0805, abs=1e-4)
    assert a.breakdown.profiling_overhead == pytest.approx(0.0805 / 0.080, abs=1e-4)
    # the breakdown table shows the same mean step (it showed the median one: 1 ms, no wait, against 80 ms unprofiled)
    assert (a.breakdown.step_s, a.breakdown.data_wait_s) == pytest.approx((0.0805, 0.0795))
    assert a.breakdown.unprofiled_step_s == pytest.approx(0.080)
    top = dg.diagnose(a).top
    assert top is not None and top.category == dg.INPUT_PIPELINE
    assert "(79.50 ms of 80.50 ms)" in top.evidence[0]


def test_more_workers_are_estimated_on_the_cores_other_processes_leave_free() -> None:
    """With 1.2 of 2 cores busy elsewhere, 2 workers were estimated 2.20x and measured 0.84x: the estimate now
    counts the free cores, and says so."""
    alone = _waiting_loader_top(num_workers=2, persistent=True)
    crowded = _waiting_loader_top(num_workers=2, persistent=True, system_pct=95.0)  # 1.9 cores busy elsewhere
    assert alone is not None and crowded is not None
    assert alone.estimated_speedup == pytest.approx(2.0)
    assert crowded.estimated_speedup is not None and crowded.estimated_speedup < 2.0
    assert any(e.startswith("other processes kept 1.9 of 4 cores busy: 4 workers would load on about 2.1 free cores")
               for e in crowded.evidence)
    # 0.04 cores busy elsewhere: it read "kept 0.0 of 4 cores busy: 4 workers would load on about 4.0 free cores"
    nearly_alone = _waiting_loader_top(num_workers=2, persistent=True, system_pct=48.5)
    assert nearly_alone is not None and not any(e.startswith("other processes kept") for e in nearly_alone.evidence)


def test_the_loaders_own_workers_are_not_other_processes() -> None:
    """The machine's use less this process's counted its CPU-bound loader workers as other processes: 2 workers on 1.9
    of 4 cores read 'other processes kept 1.9 of 4 cores busy', and 4 workers were estimated on the 2.1 cores left."""
    own = _waiting_loader_top(num_workers=2, persistent=True, system_pct=95.0, workers_busy=1.9)
    assert own is not None and own.estimated_speedup == pytest.approx(2.0)  # as on an idle machine
    assert not any("other processes" in e for e in own.evidence)
    both = _waiting_loader_top(num_workers=2, persistent=True, system_pct=95.0, workers_busy=1.0)
    assert both is not None
    assert ("other processes (not this process's 2 loader workers, which kept 1.0 cores busy) kept 0.9 of 4 cores "
            "busy: 4 workers would load on about 3.1 free cores, which the estimate counts") in both.evidence
    # a step starved by its own workers is not "a busy machine" (whose fix is an idle machine)
    starved = threads(intra=2, usable=2, process_pct=30.0, system_pct=100.0, workers=2, workers_busy=1.7)
    d = _diagnose(trace([gemm(0, 9000)], thread_info=starved))
    assert d.caveats == [] and all(f.title != dg.SHARED_MACHINE for f in d.findings)
    a = dg.analyze_all(trace([gemm(0, 9000)], thread_info=starved), CEILINGS)
    assert a.threads.other_busy_cores == pytest.approx(0.0) and a.threads.issues == []
    crowded = threads(intra=2, usable=2, process_pct=30.0, system_pct=100.0, workers=2, workers_busy=0.5)
    d = _diagnose(trace([gemm(0, 9000)], thread_info=crowded))
    assert any("(1.2 cores busy in other processes (not this process's 2 loader workers, which kept 0.5 cores busy), "
               "load average 1.0)" in c for c in d.caveats), d.caveats


def test_a_loader_waiting_on_io_is_estimated_on_its_workers_not_on_the_free_cores() -> None:
    """A loader sleeping 2 ms a sample with 1.0 of 2 cores free was estimated 1.14x for 2 workers and measured 1.91x:
    workers blocked on I/O need no core. Only loading that runs on a core is capped by the free cores."""
    waiting = _waiting_loader_top(num_workers=2, persistent=True, system_pct=95.0, core_share=0.1)
    computing = _waiting_loader_top(num_workers=2, persistent=True, system_pct=95.0, core_share=1.0)
    unknown = _waiting_loader_top(num_workers=2, persistent=True, system_pct=95.0)
    assert waiting is not None and computing is not None and unknown is not None
    # 4 workers each load a batch in 80 ms: 20 ms a batch, of which 10% on 2.1 free cores
    assert waiting.estimated_speedup == pytest.approx(2.0)
    assert any(e.startswith("loading ran on a core (or waited for one) 10% of its time and was blocked the rest, "
                            "on I/O") for e in waiting.evidence)
    assert not any(e.startswith("other processes kept") for e in waiting.evidence)
    # CPU-bound, or not measured: capped by the free cores as before, and the assumption said
    assert computing.estimated_speedup is not None and computing.estimated_speedup < 1.5
    assert computing.estimated_speedup == pytest.approx(unknown.estimated_speedup)
    assert any(e.startswith("other processes kept 1.9 of 4 cores busy") for e in computing.evidence)
    assert any(e.startswith("the loader's use of the CPU was not measured, so the estimate takes loading to be "
                            "CPU-bound") for e in unknown.evidence)


def test_a_loader_with_workers_that_cannot_keep_up() -> None:
    """2 workers, a 40 ms step waiting 30 ms: each worker takes 2 steps (80 ms) a batch. It read 'loading overlaps
    none of it' and, taking a batch to load in 2 waits (60 ms), promised 4 workers 2.67x instead of 2x."""
    top = _waiting_loader_top(num_workers=2, persistent=True)
    assert top is not None and top.category == dg.INPUT_PIPELINE
    # its workers are persistent already: only the worker count is proposed (it proposed persistent_workers=True too)
    assert top.fixes[0].loader_kwargs == (("num_workers", 4),)
    assert "loading overlaps none of it" not in " ".join(top.evidence)
    assert "the step computes for 10.00 ms while its 2 workers load the next batches; a batch takes about 80.00 ms " \
           "to load (2 x the step)" in top.evidence[1]
    assert top.estimated_speedup == pytest.approx(2.0)


@pytest.mark.parametrize("persistent", [True, False])
def test_a_loader_at_16_workers_is_not_proposed_16(persistent: bool) -> None:
    """`dlperf profile --verify` of a loader running 16 workers proposed DataLoader(num_workers=16,
    persistent_workers=True), its own settings, and --verify measured them against themselves."""
    top = _waiting_loader_top(num_workers=16, persistent=persistent)
    assert top is not None and top.category == dg.INPUT_PIPELINE  # the wait is still the bottleneck
    assert all(dict(f.loader_kwargs).get("num_workers") != 16 for f in top.fixes)
    if persistent:  # nothing of the loader's to change
        assert top.fixes == [] and "the loader already runs 16 workers" in top.fix
        assert top.setting == "the dataset's __getitem__ (make_loader's dataset)"  # not 'DataLoader(num_workers=N'
    else:  # only what differs from its settings
        assert [f.loader_kwargs for f in top.fixes] == [(("persistent_workers", True),)]
    assert top.fix.startswith("make __getitem__ cheaper") and "load batches in 16" not in top.fix
    # at best cheaper loading removes the 30 ms wait from the 40 ms step (it estimated 1.0x for 16 workers)
    assert top.estimated_speedup == pytest.approx(4.0)
    assert any("already runs 16 workers, the most dlperf proposes" in e for e in top.evidence)


def test_compute_near_the_peak_measures_only_cheaper_arithmetic_against_its_own_estimate() -> None:
    """resnet18 at 1 thread, mkldnn_convolution at 67% of peak: the estimate was int8's (2.94x) while --verify measured
    channels_last and torch.compile, which leave the arithmetic as it is, and marked the finding contradicted."""
    from tests.unit.profile.builders import FakeCeilings

    near = [gemm(i * 2000.0, 1700.0, step=0) for i in range(5)]  # 134 MFLOP in 1.7 ms: 79% of 100 GFLOP/s
    with_bf16 = FakeCeilings({"fp32": 100e9, "bf16": 300e9, "int8": 400e9}, 10e9)
    top = dg.diagnose(dg.analyze_all(trace(near), with_bf16)).top
    assert top is not None and top.category == dg.COMPUTE_BOUND and "near the machine's peak" in top.fix
    assert [f.id for f in top.fixes] == ["bf16"]
    assert top.estimated_speedup == pytest.approx(1 / ((1 - top.share) + top.share / 3.0))  # bf16's ratio
    assert "bf16's ceiling is 3.0x fp32's here" in top.fix and "int8's ceiling is 4.0x fp32's here" in top.fix
    no_bf16 = _diagnose(trace(near)).top  # fp32 and int8 only: nothing dlperf applies itself; int8's estimate
    assert no_bf16 is not None and no_bf16.fixes == []
    assert no_bf16.estimated_speedup == pytest.approx(1 / ((1 - no_bf16.share) + no_bf16.share / 4.0))


def test_compute_above_its_ceilings_is_not_confidently_near_the_peak() -> None:
    """`dlperf profile zoo:minilm` against ceilings a busy calibration cached (fp32 86 GFLOP/s): addmm at 403% of
    its ceiling, and the compute finding read "running at 376% of the ... peak ... the arithmetic runs near the
    machine's peak" with confidence high."""
    from tests.unit.profile.builders import FakeCeilings

    near = [gemm(i * 2000.0, 1700.0, step=0) for i in range(5)]  # 79 GFLOP/s
    understated = FakeCeilings({"fp32": 20e9, "bf16": 60e9}, 10e9)  # the GEMMs run at ~4x this "peak"
    top = dg.diagnose(dg.analyze_all(trace(near), understated)).top
    assert top is not None and top.category == dg.COMPUTE_BOUND and top.confidence == "low"
    assert any("the ceilings, not these operators, are off" in e for e in top.evidence)
    right = dg.diagnose(dg.analyze_all(trace(near), FakeCeilings({"fp32": 100e9, "bf16": 300e9}, 10e9))).top
    assert right is not None and right.confidence == "high"
    assert not any("are off" in e for e in right.evidence)


def test_a_bf16_model_is_held_to_the_bf16_peak_and_offered_no_bf16_autocast() -> None:
    """A bf16 MLP's addmm at 36% of the bf16 peak read "running at 36% of the 69 GFLOP/s fp32 GEMM peak", and its fixes
    included bf16 autocast, which leaves a bf16 model as it is; near the peak it was estimated by bf16's ceiling over
    fp32's and offered that autocast as the one fix."""
    from dataclasses import replace

    from tests.unit.profile.builders import FakeCeilings

    def bf16_gemm(start_us: float, dur_us: float) -> OpEvent:
        return replace(gemm(start_us, dur_us), input_dtypes=("c10::BFloat16",) * 3 + ("Scalar", "Scalar"))

    ceilings = FakeCeilings({"fp32": 100e9, "bf16": 150e9, "int8": 600e9}, 10e9)
    far = dg.diagnose(dg.analyze_all(trace([bf16_gemm(0, 9000)]), ceilings)).top  # 134 MFLOP in 9 ms: 10% of bf16's
    assert far is not None and far.category == dg.COMPUTE_BOUND
    assert far.evidence[0].endswith("running at 10% of the 150 GFLOP/s bf16 GEMM peak")
    assert [f.id for f in far.fixes] == ["compile"]
    near = [bf16_gemm(i * 1600.0, 1500.0) for i in range(5)]  # 134 MFLOP in 1.5 ms: 60% of 150 GFLOP/s
    top = dg.diagnose(dg.analyze_all(trace(near), ceilings)).top
    assert top is not None and "near the machine's peak" in top.fix
    assert top.fixes == [] and "bf16/fp16" not in top.fix and "int8's ceiling is 4.0x bf16's here" in top.fix
    assert top.estimated_speedup == pytest.approx(1 / ((1 - top.share) + top.share / 4.0))
    fp32_mm = op("aten::mm", 0, 2000.0, flops=2 * 256 * 512 * 512, shapes=((256, 512), (512, 512)),
                 dtypes=("float", "float"))
    mixed = [fp32_mm, bf16_gemm(2000.0, 2000.0)]
    compute = next(f for f in dg.diagnose(dg.analyze_all(trace(mixed), ceilings)).findings
                   if f.category == dg.COMPUTE_BOUND)
    assert "of the GEMM peaks of their dtypes (bf16 150 GFLOP/s, fp32 100 GFLOP/s)" in compute.evidence[0]


def test_a_bf16_operators_evidence_gives_the_bf16_ridge() -> None:
    """A bf16 MLP's addmm read "127.9 FLOP/B (above the ridge 4.6)": fp32's ridge, not the bf16 one that placed it."""
    from dataclasses import replace

    from tests.unit.profile.builders import FakeCeilings

    bf16_gemm = replace(gemm(0, 9000), input_dtypes=("c10::BFloat16",) * 3 + ("Scalar", "Scalar"))
    ceilings = FakeCeilings({"fp32": 100e9, "bf16": 150e9}, 10e9)
    top = dg.diagnose(dg.analyze_all(trace([bf16_gemm]), ceilings)).top
    assert top is not None and top.category == dg.COMPUTE_BOUND
    (line,) = [e for e in top.evidence if e.startswith("aten::addmm")]
    assert "(above the bf16 ridge 15.0)" in line
    fp32 = _diagnose(trace([gemm(0, 9000)])).top
    assert fp32 is not None and any("(above the ridge 10.0)" in e for e in fp32.evidence)


def test_a_one_thread_step_on_a_busy_machine_is_held_to_one_core() -> None:
    """'this process ran 1 threads but got only 0.7 of 2 cores' (a 1-thread step can use 1 core)."""
    one = dataclasses.replace(threads(intra=1, usable=2, process_pct=50.0, system_pct=95.0), busy_threads=1)
    d = _diagnose(trace([gemm(0, 9000)], thread_info=one))
    shared = next(f for f in d.findings if f.title == dg.SHARED_MACHINE)
    assert shared.evidence[0] == ("other processes kept 1.4 cores busy; this process ran 1 thread but got only 0.5 of "
                                  "1 core")


def test_fewer_threads_than_free_cores_is_a_finding_with_a_threads_fix() -> None:
    """`dlperf profile zoo:resnet18 --threads 1` on 2 idle cores: mkldnn_convolution, 75% of the step, ran at 67% of the
    1-thread peak, and nothing said a core stayed idle (the ceilings are the profiled thread count's)."""
    one = threads(intra=1, usable=2, process_pct=95.0, system_pct=47.5)  # nothing else busy
    d = _diagnose(trace([gemm(0, 9000)], thread_info=one))
    under = next(f for f in d.findings if f.title == "torch uses fewer threads than there are free cores")
    assert under.category == dg.HOST_THREADS and under.setting == "--threads 2 (torch.set_num_threads)"
    assert [f.id for f in under.fixes] == ["threads"] and under.fixes[0].threads == 2
    assert under.estimated_speedup == pytest.approx(1 / (0.1 + 0.9 / 1.8))
    assert under.share == pytest.approx(0.9 * (1 - 1 / 1.8))
    assert any("rule of thumb" in e for e in under.evidence)
    # not when the threads match the cores, nor when other processes hold the other core
    assert not any("fewer threads" in f.title for f in _diagnose(trace([gemm(0, 9000)])).findings)
    busy = threads(intra=1, usable=2, process_pct=95.0, system_pct=95.0)  # 0.95 cores busy elsewhere
    assert not any("fewer threads" in f.title for f in _diagnose(trace([gemm(0, 9000)], thread_info=busy)).findings)


def _loader_trace(profiled_wait_s: float, unprofiled_step_s: float, unprofiled_wait_s: float) -> object:
    from dataclasses import replace

    info = LoaderInfo("DataLoader", True, num_workers=0, pin_memory=False, prefetch_factor=None,
                      persistent_workers=False, batch_size=16)
    t = trace([gemm(5000, 4000, step=i) for i in range(3)], steps=3, mode=TRAIN, loader=info,
              phase_us={"data": profiled_wait_s * 1e6, "forward": 10_000 - profiled_wait_s * 1e6},
              unprofiled_s=unprofiled_step_s)
    t.steps = [replace(s, data_wait_s=profiled_wait_s) for s in t.steps]
    t.unprofiled_data_wait_s = [unprofiled_wait_s] * 3
    return t


def test_the_input_pipeline_share_is_the_unprofiled_steps_when_the_profiler_inflated_the_compute() -> None:
    """slow_input on a busy machine: the unprofiled step waited ~87 of its 93 ms, the profiled one 87 of 168 ms, and
    the finding said 52% with 'the step computes for 81.31 ms', its estimate taken from that compute."""
    d = _diagnose(_loader_trace(0.003, 0.005, 0.0045))  # profiled: 3 of 10 ms; unprofiled: 4.5 of 5 ms
    top = d.top
    assert top is not None and top.category == dg.INPUT_PIPELINE
    assert top.share == pytest.approx(0.9) and top.confidence == "high"
    assert top.evidence[0].startswith("30% of each training step waits")  # the breakdown's number, as before
    assert "without the profiler it waits 4.50 ms of a 5.00 ms step (90%)" in top.evidence[2]
    assert top.estimated_speedup == pytest.approx(5.0 / 2.25)  # 2 workers: max(0.5 compute, 4.5 / 2)
    # a wait the profiled steps hid below the minimum share is found
    hidden = _diagnose(_loader_trace(0.0015, 0.005, 0.003)).findings
    assert [f.share for f in hidden if f.category == dg.INPUT_PIPELINE] == [pytest.approx(0.6)]
    # close figures: the profiled steps' (one number in the finding, the breakdown and the loader line)
    same = next(f for f in _diagnose(_loader_trace(0.005, 0.010, 0.0055)).findings if f.category == dg.INPUT_PIPELINE)
    assert same.share == pytest.approx(0.5) and not any("without the profiler" in e for e in same.evidence)


def test_a_small_cache_resident_operator_stalled_for_milliseconds_counts_as_a_stall() -> None:
    """An addmm of 33 KFLOP on 18 KB (1.8 FLOP/B, below the ridge, in cache) taking 14 ms of a 16 ms step while
    2 threads shared 1.3 free cores. The stall rule counted compute-bound operators only, so the finding rested on
    the starved share alone (got 1.3 of 2 cores: 35% x the operators' share)."""
    busy = threads(intra=2, usable=2, process_pct=130.0, system_pct=100.0)
    stalled = _diagnose(trace([gemm(0, 14_000, m=4, k=64, n=64)], step_us=16_000.0, thread_info=busy))
    shared = next(f for f in stalled.findings if f.title == dg.SHARED_MACHINE)
    assert shared.share == pytest.approx(14 / 16) and shared.confidence == "medium"
    assert any("cache-resident" in e and "descheduled threads" in e for e in shared.evidence)
    # the same operator in 20 calls of 0.7 ms: far below its roofline too, but each call shorter than a time
    # slice, more likely its own fixed cost: only the starved signal
    short = [gemm(i * 700, 700, m=4, k=64, n=64) for i in range(20)]
    calls = _diagnose(trace(short, step_us=16_000.0, thread_info=busy))
    shared = next(f for f in calls.findings if f.title == dg.SHARED_MACHINE)
    assert shared.share == pytest.approx(0.35 * 14 / 16) and shared.confidence == "low"
    assert not any("descheduled threads" in e for e in shared.evidence)


def test_quiet_dynamo_holds_back_dynamo_s_warnings_and_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    """--verify of a compile fix printed Dynamo's graph-break log lines and its UserWarnings into the report."""
    import logging
    import warnings

    from dlperf.profile.verify import quiet_dynamo

    dynamo = logging.getLogger("torch._dynamo")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_dynamo():
            warnings.warn_explicit("Dynamo does not know how to trace", UserWarning, "functions.py", 1,
                                   module="torch._dynamo.utils")
            dynamo.warning("Graph break from `Tensor.item()`")
        warnings.warn_explicit("kept", UserWarning, "x.py", 1, module="user")
    assert [str(w.message) for w in seen] == ["kept"]
    assert "Graph break" not in caplog.text


def _passes_of(setting: str | None) -> list[str]:
    import shlex

    assert setting is not None and setting.startswith("dlperf optimize ")
    words = shlex.split(setting.split(" (", 1)[0])
    return words[words.index("--passes") + 1].split(",")


def test_the_compute_findings_apply_with_is_a_command_line_optimize_takes() -> None:
    """zoo:minilm's profile said 'apply with: dlperf optimize (int8 / precision / compile passes)', and
    `dlperf optimize zoo:minilm --passes int8,precision,compile` is refused ('--passes names unknown passes int8'):
    the finding now names the passes optimize knows, as `--passes` takes them."""
    from dlperf.optimize.space import check_pass_names
    from tests.unit.profile.builders import FakeCeilings

    far = _diagnose(trace([gemm(0, 9000)])).top
    near = dg.diagnose(dg.analyze_all(trace([gemm(i * 2000.0, 1700.0, step=0) for i in range(5)]),
                                      FakeCeilings({"fp32": 100e9, "bf16": 300e9, "int8": 400e9}, 10e9))).top
    assert far is not None and near is not None and "near the machine's peak" in near.fix
    assert _passes_of(far.setting) == ["compile", "precision"]  # torch.compile, then lower precision
    assert _passes_of(near.setting) == ["dynamic_int8", "onnxruntime", "openvino", "precision"]  # int8, bf16
    for finding in (far, near):
        check_pass_names(_passes_of(finding.setting))  # raises ConfigError for a name that is no pass


def test_a_nested_copy_under_half_a_percent_of_the_step_is_not_said_to_be_left_out() -> None:
    """A repeat's copy_ on 512 MiB beside one small Linear (its bias copy_ nested in addmm, 32 µs of a 2.4 s step):
    the bandwidth finding read "not counted: 0% of the step in memory-bound operators nested inside matrix products
    ... (Linear's bias copied into addmm's output)", a line about nothing."""
    addmm = dataclasses.replace(gemm(0, 100, m=512, k=2048, n=2048), self_us=60.0, is_leaf=False)
    bias = op("aten::copy_", 10, 40, depth=1, shapes=((512, 2048), (512, 2048)), dtypes=("float", "float"))
    muls = [elementwise(200 + i * 2000.0, 1900.0) for i in range(5)]
    found = next(f for f in _diagnose(trace([addmm, bias, *muls])).findings if f.category == dg.MEMORY_BANDWIDTH)
    assert not any(e.startswith("not counted") for e in found.evidence)


@dataclasses.dataclass
class _Extra:
    count: int

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count}


@dataclasses.dataclass
class _MoreAnalyses(dg.Analyses):
    extra: _Extra | None = None
    later: _Extra | None = None


def test_analyses_to_dict_writes_every_analysis_field_and_a_new_one_without_being_told() -> None:
    a = dg.analyze_all(trace([gemm(0, 9000)]), CEILINGS)
    # today's keys and shape, as the stored records' readers read them (loader None for an inference trace)
    assert a.to_dict() == {"breakdown": a.breakdown.to_dict(), "operators": a.operators.to_dict(),
                           "launch": a.launch.to_dict(), "memory": a.memory.to_dict(),
                           "threads": a.threads.to_dict(), "loader": None}
    assert list(a.to_dict()) == ["breakdown", "operators", "launch", "memory", "threads", "loader"]
    more = _MoreAnalyses(**{f.name: getattr(a, f.name) for f in dataclasses.fields(a)}, extra=_Extra(3))
    assert more.to_dict()["extra"] == {"count": 3}
    assert more.to_dict()["later"] is None
    assert "mode" not in more.to_dict() and "comm_share" not in more.to_dict()


def test_an_int8_step_near_its_peak_is_not_told_to_quantize_to_int8() -> None:
    """torch._int_mm at 77% of the int8 peak (a profile of ours) read "do it cheaper, with int8 quantization" and
    `apply with: dlperf optimize WORKLOAD --passes dynamic_int8,onnxruntime,openvino`, for arithmetic already int8."""
    from tests.unit.profile.builders import FakeCeilings

    int_mm = [op("aten::_int_mm", i * 2000.0, 1700.0, shapes=((512, 2048), (2048, 512)),
                 dtypes=("signed char", "signed char")) for i in range(5)]  # 1.07 G in 1.7 ms: 63% of 1 T
    top = dg.diagnose(dg.analyze_all(trace(int_mm), FakeCeilings({"fp32": 100e9, "int8": 1000e9}, 10e9))).top
    assert top is not None and top.category == dg.COMPUTE_BOUND and "near the machine's peak in int8" in top.fix
    assert "quantization" not in top.fix
    assert top.evidence[0].endswith("running at 63% of the 1000 GOP/s int8 GEMM peak")  # integer operations
    assert top.setting is None and top.fixes == [] and top.estimated_speedup is None


def test_an_int8_linear_at_batch_1_is_bound_by_its_weights_and_told_to_batch() -> None:
    """A quantize_dynamic'd Linear(2048, 2048) at batch 1 (4 MiB of int8 weights read per row) read "fix: read and
    write each tensor fewer times: fuse chains of elementwise operators (torch.compile)": its operator was not taken
    for a matrix product, whose weights' reads a larger batch shares."""
    calls = []
    for i in range(4):
        calls += [op("quantized::linear_dynamic", i * 2500.0, 2000.0, self_us=1990.0, leaf=False,
                     shapes=((1, 2048), (), ()), dtypes=("float", "ScriptObject", "Scalar")),
                  op("aten::empty_like", i * 2500.0 + 5, 1, depth=1, shapes=((1, 2048), (), (), (), (), ()),
                     dtypes=("float", "Scalar", "Scalar", "", "", "Scalar"))]
    top = _diagnose(trace(calls)).top
    assert top is not None and top.category == dg.MEMORY_BANDWIDTH
    assert top.fix.startswith("batch more items per call") and "int8 weights" not in top.fix  # they are int8
    assert any("matrix products are 100% of that time" in e for e in top.evidence)
