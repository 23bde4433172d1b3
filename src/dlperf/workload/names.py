"""The names of a workload's unnamed inputs and outputs, one convention for everything that names them."""

from __future__ import annotations


def tensor_name(kind: str, index: int) -> str:
    """`input__0`, `output__1`: the name of an unnamed input or output (`kind` 'input' or 'output') at `index`.

    Triton's convention, which `dlperf serve WORKLOAD` gives a workload's tensors and every exporter (torch recipe,
    ONNX Runtime, OpenVINO, TensorRT) writes into an artifact's manifest, so a client written against the served
    workload works against its served artifact. Artifacts exported before this named them `input_0`; they are
    served by their manifest's names."""
    return f"{kind}__{index}"
