"""Operators by self time, with FLOPs, bytes moved, arithmetic intensity and their place on this machine's
roofline (compute- or bandwidth-bound, % of the ceiling), from calibrate's Ceilings.

FLOPs come from torch.profiler (matmul, conv and a few elementwise ops); an elementwise op it does not
count is taken as one FLOP per output element. A Linear of int8 weights (`quantized::linear_dynamic`) is an int8
matrix product, its width read from the accumulator it allocates. Bytes moved are estimated from the input shapes
and dtypes the profiler records: every tensor input is read once (a broadcast dimension, stride 0, once; the
destination of `copy_` or `fill_` not at all) and the output (the largest input's size, or MxN
for a matrix product, or for a convolution the size its FLOPs imply; nothing for a reduction of one tensor, such
as a sum) written once; view ops move
nothing; a row lookup (`index_select`, `embedding`) reads the indices and only the rows it selects. These are
estimates: caches make real traffic lower for small tensors, and the estimate says nothing of ops the profiler
gives no shapes for.

On CUDA an operator's time is the time of the kernels it launched itself (its host time is only the
launch, which the launch analysis judges), an operator that launched none is left out, and the ceilings
are the device's.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from dlperf.calibrate.ceilings import ceilings_caveat, ceilings_news
from dlperf.errors import ProfileError
from dlperf.measure.stats import median
from dlperf.profile.analyzers.launch import TINY_KERNEL_US, TINY_OP_US
from dlperf.profile.trace import DTYPE_BYTES, OpEvent, ProfileTrace, dtype_kind

COMPUTE = "compute"
BANDWIDTH = "bandwidth"
OVERHEAD = "overhead"
"""Per call shorter than TINY_OP_US (CUDA: its kernels shorter than TINY_KERNEL_US): dispatch or launch cost
dominates, the roofline does not apply."""
CACHE_RESIDENT = "cache-resident"
"""Low intensity but a working set small enough to stay in cache: DRAM bandwidth is not what limits it."""
UNKNOWN = "unknown"

CACHE_RESIDENT_BYTES = 2 << 20
"""Bytes moved per call below which an op's data stays in the caches (about one core's L2); on CUDA the
device's L2 size, which the capture records in the trace (`ProfileTrace.cache_bytes`)."""

VIEW_OPS = frozenset({
    "aten::view", "aten::reshape", "aten::t", "aten::transpose", "aten::permute", "aten::expand",
    "aten::as_strided", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::detach",
    "detach", "aten::alias", "aten::_unsafe_view", "aten::resolve_conj", "aten::resolve_neg", "aten::empty",
    "aten::empty_strided", "aten::empty_like", "aten::split", "aten::chunk", "aten::unbind", "aten::narrow",
    "aten::flatten", "aten::lift_fresh", "aten::_reshape_alias", "aten::numpy_T", "aten::contiguous",
})
ELEMENTWISE_OPS = frozenset({
    "aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::sub_", "aten::div", "aten::div_",
    "aten::relu", "aten::relu_", "aten::clamp_min", "aten::clamp_min_", "aten::clamp", "aten::gelu",
    "aten::sigmoid", "aten::tanh", "aten::silu", "aten::exp", "aten::neg", "aten::abs", "aten::threshold_backward",
    "aten::addcmul_", "aten::addcdiv_", "aten::sqrt", "aten::rsqrt", "aten::pow", "aten::fill_", "aten::where",
    "aten::maximum", "aten::minimum", "aten::sin", "aten::cos", "aten::hardtanh", "aten::leaky_relu",
})
GATHER_OPS = frozenset({"aten::index_select", "aten::embedding"})
"""Row lookups (an embedding table): they read only the selected rows, not the whole table."""
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::_int_mm"})
REDUCTION_OPS = frozenset({
    "aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min", "aten::prod",
    "aten::argmax", "aten::argmin", "aten::norm", "aten::linalg_vector_norm", "aten::var", "aten::std",
    "aten::var_mean", "aten::std_mean", "aten::logsumexp", "aten::all", "aten::any",
})
"""Of one tensor, they write a reduced output (taken as negligible: the profiler records no output shape), not one
of the input's size: a row sum of [4, 8M] read "17.45 GB/s, 75% of its roofline" for the 8.7 GB/s it read at."""
DESTINATION_OPS = frozenset({"aten::copy_", "aten::fill_", "aten::zero_"})
"""Their first input is only written: `out.copy_(src)` reads src, not out. Linear's bias, copied into the output of
`addmm` as `out.copy_(bias.expand(...))`, was counted as reading two outputs' sizes and writing a third: 3x the
traffic: MiniLM's 39 copies a step at batch 32 read 1.02 GB moved for the 0.34 GB they move."""
QUANTIZED_LINEAR_OPS = frozenset({"quantized::linear_dynamic", "quantized::linear_relu_dynamic"})
"""Linear layers of int8 weights (`torch.ao.quantization.quantize_dynamic`, dlperf's `dynamic_int8` pass): int8
matrix products the profiler gives no FLOPs for, whose weight is a packed object it gives no shape for. Their output
width is read from the int32 accumulator they allocate inside the call (`_quantized_outputs`); counted as an input's
size with no FLOPs, a 2048 x 2048 x 2048 one read "bandwidth-bound, 0.0 FLOP/B, 4% of the bandwidth"."""


class CeilingsLike(Protocol):
    """What the roofline needs from dlperf.calibrate.Ceilings."""

    gemm_flops: dict[str, float]
    memory_bandwidth_bytes_s: float


@dataclass
class OperatorStat:
    """One operator name, summed over its calls in the profiled steps, shown per step."""

    name: str
    calls_per_step: float
    self_s: float
    """Self time per step (excluding nested operators)."""
    share: float
    """Self time / profiled step time."""
    flops: float
    bytes_moved: float
    dtype: str
    intensity: float | None
    """FLOPs per byte moved; None when no bytes are known."""
    bound: str
    """'compute' | 'bandwidth' | 'cache-resident' | 'overhead' | 'unknown'."""
    achieved_flops_s: float | None
    achieved_bytes_s: float | None
    pct_of_peak: float | None
    """Achieved over this op's roofline ceiling: the GEMM peak when compute-bound, bandwidth x intensity
    when bandwidth-bound."""
    in_gemm_s: float = 0.0
    """Of `self_s`, the time of its calls nested inside a matrix product or convolution (Linear's bias copied into
    `addmm`'s output, `copy_`): part of that operator's call, which no fusion of elementwise operators removes."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ElementwiseChains:
    """Runs of two or more memory-bound elementwise operators in a row on one thread, on tensors of one size, not
    nested in a matrix product: what fusing each run into one kernel (torch.compile) leaves of their traffic.

    The trace records no tensor identities, so each operator after a run's first is taken to read the output of the
    one before it (one of its inputs of the run's size): fused, a run reads only its other inputs, once, and writes
    its last output. That is the least traffic fusion can leave, so the saving it implies is an upper bound."""

    runs_per_step: float
    time_s: float
    """Per step (median), the runs' operators' self time."""
    eager_bytes: float
    """Per step, the bytes the runs' operators move as they run (as in their OperatorStat)."""
    fused_bytes: float
    """Per step, the bytes the runs would move fused."""
    longest_ops: int
    """The run that moves the most bytes: its operators, the bytes of its output and its passes over a tensor of
    that size, eager and fused."""
    tensor_bytes: float
    eager_passes: float
    fused_passes: float
    gap_s: float = 0.0
    """Per step (median), the time between a run's operators, outside every operator (CPU only): freeing the
    intermediate tensors, Python and dispatch between the calls, which a fused run has none of. Left out, 5 operators on
    64 MiB whose gaps took 24% of the step were estimated 2.45x and measured 4.40x compiled."""


@dataclass
class OperatorAnalysis:
    operators: list[OperatorStat]
    """Sorted by self time, largest first."""
    step_s: float
    peak_flops: dict[str, float]
    bandwidth_bytes_s: float
    ridge_intensity: float
    """FLOP/byte where fp32 GEMM peak and bandwidth meet: above it an op is compute-bound."""
    share_by_bound: dict[str, float] = field(default_factory=dict)
    """Share of the step's self time by bound category."""
    timed_by: str = "self time"
    """What an operator's time is: its host self time, or on CUDA the time of the kernels it launched."""
    ceilings_caveat: str | None = None
    """Why the ceilings, and so every % of peak, are not to be trusted: the warning their calibration recorded (a
    busy machine) and a cached ceiling carries to every later profile; None when they recorded none."""
    ceilings_note: str | None = None
    """What this profile did to the cached ceilings (measured them again, and why); None when it used them as they
    were."""

    elementwise_chains: ElementwiseChains | None = None
    """Runs of memory-bound elementwise operators in a row; None where no step has one."""

    def top(self, n: int = 10) -> list[OperatorStat]:
        return self.operators[:n]

    def efficiency(self, bound: str) -> float | None:
        """Self-time-weighted % of peak of the ops of one bound category."""
        ops = [o for o in self.operators if o.bound == bound and o.pct_of_peak is not None]
        total = sum(o.self_s for o in ops)
        if total <= 0:
            return None
        return sum(o.self_s * (o.pct_of_peak or 0.0) for o in ops) / total

    def to_dict(self) -> dict[str, Any]:
        return {
            "operators": [o.to_dict() for o in self.operators],
            "step_s": self.step_s,
            "peak_flops": self.peak_flops,
            "bandwidth_bytes_s": self.bandwidth_bytes_s,
            "ridge_intensity": self.ridge_intensity,
            "share_by_bound": self.share_by_bound,
            "timed_by": self.timed_by,
            "ceilings_caveat": self.ceilings_caveat,
            "ceilings_note": self.ceilings_note,
            "elementwise_chains": asdict(self.elementwise_chains) if self.elementwise_chains else None,
        }


def _is_gemm(name: str) -> bool:
    """A matrix product or a convolution: operators nested in its call are part of it."""
    return name in MATMUL_OPS or name in QUANTIZED_LINEAR_OPS or name == "aten::linear" or "conv" in name


def _inside_gemm(ops: list[OpEvent]) -> set[int]:
    """Indices of the ops nested inside a matrix product or convolution on the same thread, products themselves
    excluded: an `addmm` inside `aten::linear` is the product (its memory-bound time is the batch's weight reads the
    bandwidth finding reports), not a part of one.

    One sweep in start order with a stack of the open products' ends per thread (a scan back over earlier products
    took time quadratic in a trace's operators)."""
    order = sorted(range(len(ops)), key=lambda k: (ops[k].thread, ops[k].start_us, -ops[k].end_us))
    open_ends: dict[int, list[float]] = {}
    inside: set[int] = set()
    for k in order:
        o = ops[k]
        ends = open_ends.setdefault(o.thread, [])
        while ends and ends[-1] < o.end_us:  # a product that ends before this op does is over (calls nest)
            ends.pop()
        gemm = _is_gemm(o.name)
        if ends and o.depth > 0 and not gemm:
            inside.add(k)
        if gemm:
            ends.append(o.end_us)
    return inside


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def _read_elements(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """The elements of an input read once: a broadcast dimension (stride 0, an `expand`) holds one element."""
    if len(stride) != len(shape):
        return _numel(shape)
    return math.prod(n for n, st in zip(shape, stride, strict=True) if st != 0)


def _forward_conv(name: str) -> bool:
    """A forward convolution's operator (not its backward, nor a transposed one, whose FLOPs count its input)."""
    return "conv" in name and "backward" not in name and "transpose" not in name


def op_bytes_and_flops(op: OpEvent) -> tuple[float, float]:
    """(bytes moved, FLOPs) estimated for one call; see the module docstring."""
    if op.name in VIEW_OPS or (op.name == "aten::to" and op.is_leaf):
        # a `to` that converts calls `_to_copy`, whose `copy_` moves the data; one that calls nothing returned its
        # input as it was (a float32 tensor's `.to(torch.float32)`), and read "23652.88 GB/s" for 32 MiB in 1 us
        return 0.0, 0.0
    strides = op.input_strides or ((),) * len(op.input_shapes)
    inputs = [
        (shape, DTYPE_BYTES[dtype], _read_elements(shape, stride))
        for shape, dtype, stride in zip(op.input_shapes, op.input_dtypes, strides, strict=False)
        if dtype in DTYPE_BYTES
    ]
    tensors = [(shape, size) for shape, size, _ in inputs]
    if not tensors:
        return 0.0, float(op.flops)
    if op.name in GATHER_OPS and len(tensors) >= 2 and len(tensors[0][0]) >= 1:
        (table, size), (index, index_size) = tensors[0], tensors[-1]
        rows = _numel(index) * (_numel(table) // max(1, table[0]))
        return float(_numel(index) * index_size + 2 * rows * size), 0.0
    read = sum(elements * size for _, size, elements in inputs[1 if op.name in DESTINATION_OPS else 0:])
    largest_shape, largest_size = max(tensors, key=lambda t: _numel(t[0]) * t[1])
    out_elems = _numel(largest_shape)
    product_flops = 0.0
    if op.name in MATMUL_OPS:
        mats = [s for s, _ in tensors if len(s) >= 2]
        if len(mats) >= 2:
            a, b = mats[-2], mats[-1]
            out_elems = math.prod(a[:-1]) * b[-1]
            product_flops = 2.0 * out_elems * a[-1]
    write = out_elems * largest_size
    if op.name == "aten::_int_mm":
        write = out_elems * 4  # int8 in, int32 out
    if op.name in DESTINATION_OPS:  # writes its first input, in that input's dtype (a cast copy_ included)
        write = _numel(tensors[0][0]) * tensors[0][1]
    # the profiler counts mm, addmm, bmm and baddbmm, not torch._int_mm: an int8 product read "0.0 FLOP/B (below the
    # int8 ridge 139.8), 4% of its roofline ceiling", bandwidth-bound
    flops = float(op.flops) or product_flops
    if op.name in REDUCTION_OPS and len(tensors) == 1:
        return float(read), flops or float(out_elems)  # one FLOP per element read
    if "scaled_dot_product" in op.name and flops == 0:
        # a backward's arguments begin grad_out, query, key, value (the CPU kernel's and CUDA's flash, efficient and
        # cuDNN ones); a forward's query, key, value
        backward = "backward" in op.name
        qkv = [shape for shape, _ in tensors[1 if backward else 0:][:3]]
        if len(qkv) == 3 and all(len(t) == 4 for t in qkv):
            q, k, v = qkv
            # QK^T and attention x V: 2 * B * H * L * S * (D + Dv); the backward as model FLOPs, 2x the forward
            # (dV, dP, dQ, dK; not the scores flash attention recomputes), as train's MFU counts it
            flops = 2.0 * q[0] * q[1] * q[2] * k[2] * (q[3] + v[3]) * (2 if backward else 1)
            # the forward writes its output (L x Dv), the backward the gradients of query, key and value
            out_elems = _numel(q) + _numel(k) + _numel(v) if backward else q[0] * q[1] * q[2] * v[3]
            write = out_elems * largest_size
    if _forward_conv(op.name) and flops > 0 and len(tensors) >= 2 and len(tensors[1][0]) >= 3:
        # the profiler's conv FLOPs are 2 x output elements x (in channels / groups x kernel): the output's size
        # from them, stride and padding included (a stem conv's 64x112x112 output read as its 3x224x224 input's size)
        out_elems = round(flops / (2 * _numel(tensors[1][0][1:])))
        write = out_elems * tensors[0][1]
    if op.name == "aten::convolution_backward" and len(tensors) >= 3 and flops == 0:
        grad_out, weight = tensors[0][0], tensors[2][0]
        if len(grad_out) >= 3 and len(weight) >= 3:
            # Gradients of input and of weight: each as many multiply-adds as the forward convolution.
            flops = 2.0 * 2.0 * _numel(grad_out) * _numel(weight[1:])
    if flops == 0 and op.name in ELEMENTWISE_OPS:
        flops = float(out_elems)
    return float(read + write), flops


def _quantized_outputs(ops: list[OpEvent]) -> dict[int, int]:
    """For each call of a QUANTIZED_LINEAR_OPS operator, its output width: the last dimension of the int32
    accumulator it allocates inside the call (`aten::empty_like` of the output's shape, rows as the input's). A call
    where none is found (another quantized engine) is left out: its FLOPs stay unknown, and so does its bound."""
    order = sorted(range(len(ops)), key=lambda k: (ops[k].thread, ops[k].start_us, -ops[k].end_us))
    widths: dict[int, int] = {}
    for pos, k in enumerate(order):
        o = ops[k]
        if o.name not in QUANTIZED_LINEAR_OPS or not o.input_shapes or len(o.input_shapes[0]) < 2:
            continue
        for j in order[pos + 1:]:
            inner = ops[j]
            if inner.thread != o.thread or inner.start_us > o.end_us:
                break
            shape = inner.input_shapes[0] if inner.input_shapes else ()
            if inner.name == "aten::empty_like" and len(shape) >= 2 and shape[:-1] == o.input_shapes[0][:-1]:
                widths[k] = shape[-1]
                break
    return widths


def _quantized_linear_io(op: OpEvent, width: int | None) -> tuple[float, float]:
    """(bytes moved, FLOPs) of one int8-weight Linear call of output `width`: its input read, its int8 weight read,
    its output written in the input's dtype; 2 x rows x in x out FLOPs (integer operations). (0, 0) where the width is
    not known: the roofline cannot place it."""
    x = op.input_shapes[0] if op.input_shapes else ()
    if width is None or len(x) < 2:
        return 0.0, 0.0
    rows, k = math.prod(x[:-1]), x[-1]
    size = DTYPE_BYTES.get(op.input_dtypes[0] if op.input_dtypes else "float", 4)
    return float(rows * k * size + k * width + rows * width * size), 2.0 * rows * k * width


def _elementwise_io(op: OpEvent) -> tuple[list[tuple[int, float]], int, float]:
    """An elementwise call's tensor inputs as (elements, bytes read), its output's elements and bytes written."""
    strides = op.input_strides or ((),) * len(op.input_shapes)
    inputs = [(_numel(shape), _read_elements(shape, stride) * DTYPE_BYTES[dtype], DTYPE_BYTES[dtype])
              for shape, dtype, stride in zip(op.input_shapes, op.input_dtypes, strides, strict=False)
              if dtype in DTYPE_BYTES]
    if not inputs:
        return [], 0, 0.0
    out_elems, _, size = max(inputs, key=lambda t: t[0] * t[2])
    reads = [(n, float(b)) for n, b, _ in inputs[1 if op.name in DESTINATION_OPS else 0:]]
    return reads, out_elems, float(out_elems * size)


def _elementwise_chains(trace: ProfileTrace, in_gemm: set[int], bandwidth_ops: set[str], scale_of: dict[int, float],
                        step_s: float, cuda: bool) -> ElementwiseChains | None:
    """Find the runs of ElementwiseChains: per step and thread, in start order, view operators pass, any other
    operator (or one nested in the run's last operator, or an elementwise one of another size) ends a run."""
    n_steps = len(trace.steps)
    runs: list[tuple[int, list[OpEvent]]] = []
    order = sorted((k for k, o in enumerate(trace.ops) if o.step >= 0 and o.phase != "data"),
                   key=lambda k: (trace.ops[k].thread, trace.ops[k].step, trace.ops[k].start_us))
    run: list[OpEvent] = []
    run_elems = 0
    for k in order:
        o = trace.ops[k]
        if run and (o.thread != run[-1].thread or o.step != run[-1].step):
            runs.append((run[0].step, run))
            run = []
        if o.name in VIEW_OPS or (run and o.start_us < run[-1].end_us) or (
                o.name in ELEMENTWISE_OPS and not o.is_leaf and o.self_us < 0.5 * o.dur_us):
            # moves nothing, runs inside the run's last operator (part of its call), or calls the one that does the
            # work (aten::relu calls aten::clamp_min)
            continue
        _, elems, _ = _elementwise_io(o) if o.name in ELEMENTWISE_OPS else ([], 0, 0.0)
        if o.name not in ELEMENTWISE_OPS or o.name not in bandwidth_ops or k in in_gemm or elems == 0:
            runs.append((o.step, run))
            run = []
            continue
        if run and elems != run_elems:
            runs.append((o.step, run))
            run = []
        run.append(o)
        run_elems = elems
    runs.append((run[0].step if run else 0, run))
    runs = [(step, r) for step, r in runs if len(r) >= 2]
    if not runs or n_steps == 0:
        return None
    time_s = [0.0] * n_steps
    gap_s = [0.0] * n_steps
    eager = fused = 0.0
    longest: tuple[float, int, float, float] = (0.0, 0, 0.0, 0.0)
    for step, r in runs:
        run_eager = sum(op_bytes_and_flops(o)[0] for o in r)
        reads, elems, written = _elementwise_io(r[0])
        run_fused = sum(b for _, b in reads) + _elementwise_io(r[-1])[2]
        for o in r[1:]:
            reads = _elementwise_io(o)[0]
            chained = next((i for i, (n, _) in enumerate(reads) if n == elems), None)
            run_fused += sum(b for i, (_, b) in enumerate(reads) if i != chained)
        time_s[step] += sum(o.device_us if cuda else o.self_us for o in r) * 1e-6 * scale_of.get(step, 1.0)
        if not cuda:  # on CUDA the host's gaps overlap the kernels
            gap_s[step] += sum(max(0.0, b.start_us - a.end_us) for a, b in itertools.pairwise(r)) * 1e-6 \
                * scale_of.get(step, 1.0)
        eager += run_eager
        fused += run_fused
        if run_eager > longest[0]:
            longest = (run_eager, len(r), written, run_fused)
    run_eager, n_ops, tensor_bytes, run_fused = longest
    return ElementwiseChains(
        runs_per_step=len(runs) / n_steps, time_s=min(median(time_s), step_s),
        gap_s=min(median(gap_s), step_s - min(median(time_s), step_s)), eager_bytes=eager / n_steps,
        fused_bytes=min(fused, eager) / n_steps, longest_ops=n_ops, tensor_bytes=tensor_bytes,
        eager_passes=run_eager / tensor_bytes if tensor_bytes else 0.0,
        fused_passes=run_fused / tensor_bytes if tensor_bytes else 0.0,
    )


def analyze(trace: ProfileTrace, ceilings: CeilingsLike, tiny_op_us: float = TINY_OP_US) -> OperatorAnalysis:
    """Aggregate operators by name and place each on the roofline of `ceilings`."""
    trace.validate()
    fp32 = ceilings.gemm_flops.get("fp32")
    bandwidth = ceilings.memory_bandwidth_bytes_s
    if not fp32 or fp32 <= 0 or bandwidth <= 0:
        raise ProfileError("the roofline needs positive fp32 GEMM FLOP/s and memory bandwidth in the ceilings")
    n_steps = len(trace.steps)
    # Medians over steps, not sums: on a shared machine one step can be descheduled in the middle of any op.
    step_s = median(trace.step_wall_s)
    scale_of = {s.index: s.wall_s / (s.dur_us * 1e-6) if s.dur_us > 0 else 1.0 for s in trace.steps}
    cuda = trace.device.startswith("cuda")
    if cuda:
        tiny_op_us = min(tiny_op_us, TINY_KERNEL_US)
    cache_bytes = trace.cache_bytes or CACHE_RESIDENT_BYTES
    groups: dict[str, dict[str, Any]] = {}
    in_gemm = _inside_gemm(trace.ops)
    quantized = _quantized_outputs(trace.ops)
    for i, op in enumerate(trace.ops):
        if op.step < 0 or op.phase == "data":
            continue
        own_us = op.device_us if cuda else op.self_us
        if cuda and own_us <= 0:
            continue  # launched no kernel itself: a wrapper, a view or host-only work
        g = groups.setdefault(op.name, {"calls": 0, "self_us": 0.0, "flops": 0.0, "bytes": 0.0, "dtypes": {},
                                        "per_step_s": [0.0] * n_steps, "in_gemm_us": 0.0})
        g["calls"] += 1
        g["self_us"] += own_us
        if i in in_gemm:
            g["in_gemm_us"] += own_us
        g["per_step_s"][op.step] += own_us * 1e-6 * scale_of.get(op.step, 1.0)
        # Only ops that do their own work count FLOPs and bytes: a leaf, one the profiler gave FLOPs, one
        # that spends most of its time in itself rather than in nested ops, or on CUDA one that ran kernels.
        if cuda or op.is_leaf or op.flops > 0 or op.self_us >= 0.5 * op.dur_us:
            b, f = (_quantized_linear_io(op, quantized.get(i)) if op.name in QUANTIZED_LINEAR_OPS
                    else op_bytes_and_flops(op))
            g["bytes"] += b
            g["flops"] += f
        # an int8-weight Linear takes float inputs; its product runs on the int8 unit, held to int8's ceiling
        kind = "int8" if op.name in QUANTIZED_LINEAR_OPS else dtype_kind(op.input_dtypes)
        g["dtypes"][kind] = g["dtypes"].get(kind, 0) + 1
    stats: list[OperatorStat] = []
    for name, g in groups.items():
        self_s = median(g["per_step_s"])
        flops = g["flops"] / n_steps
        nbytes = g["bytes"] / n_steps
        dtype = max(g["dtypes"], key=g["dtypes"].get)
        peak = ceilings.gemm_flops.get(dtype) or fp32
        per_call_us = g["self_us"] / g["calls"]
        intensity = flops / nbytes if nbytes > 0 else None
        achieved_f = flops / self_s if self_s > 0 and flops > 0 else None
        achieved_b = nbytes / self_s if self_s > 0 and nbytes > 0 else None
        if per_call_us < tiny_op_us:
            bound, pct = OVERHEAD, None
        elif intensity is None:
            bound, pct = (COMPUTE, (achieved_f or 0.0) / peak) if flops > 0 else (UNKNOWN, None)
        elif intensity >= peak / bandwidth:
            bound, pct = COMPUTE, (achieved_f or 0.0) / peak
        elif nbytes / (g["calls"] / n_steps) < cache_bytes:
            bound, pct = CACHE_RESIDENT, None
        else:
            bound = BANDWIDTH
            pct = (achieved_b or 0.0) / bandwidth
        stats.append(OperatorStat(
            name=name, calls_per_step=g["calls"] / n_steps, self_s=self_s, share=self_s / step_s if step_s else 0.0,
            flops=flops, bytes_moved=nbytes, dtype=dtype, intensity=intensity, bound=bound,
            achieved_flops_s=achieved_f, achieved_bytes_s=achieved_b, pct_of_peak=pct,
            in_gemm_s=self_s * g["in_gemm_us"] / g["self_us"] if g["self_us"] > 0 else 0.0,
        ))
    stats.sort(key=lambda s: s.self_s, reverse=True)
    # A bound's share is the median over steps of its operators' time in each step: a sum of each operator's own
    # median mixes steps (mul's slow step with add's), and a noisy bandwidth-bound step read "explains 103% of
    # the step". Within a step its operators' self times fit in the step, so this share stays at most 100%.
    per_step: dict[str, list[float]] = {}
    for s in stats:
        summed = per_step.setdefault(s.bound, [0.0] * n_steps)
        for i, t in enumerate(groups[s.name]["per_step_s"]):
            summed[i] += t
    shares = {bound: median(times) / step_s if step_s else 0.0 for bound, times in per_step.items()}
    # the ceilings its % of peak divides by: each operator's dtype (fp32 where none was calibrated, and for the
    # ridge) and the bandwidth; a warning about another dtype's ceiling does not concern them
    used = {"fp32", "bandwidth", *(s.dtype for s in stats if s.dtype in ceilings.gemm_flops)}
    return OperatorAnalysis(operators=stats, step_s=step_s, peak_flops=dict(ceilings.gemm_flops),
                            bandwidth_bytes_s=bandwidth, ridge_intensity=fp32 / bandwidth, share_by_bound=shares,
                           timed_by="kernel time" if cuda else "self time",
                           ceilings_caveat=ceilings_caveat(ceilings, uses=used),
                           ceilings_note=ceilings_news(ceilings),
                           elementwise_chains=_elementwise_chains(
                               trace, in_gemm, {s.name for s in stats if s.bound == BANDWIDTH}, scale_of, step_s, cuda))
