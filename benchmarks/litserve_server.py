"""LitServe serving a dlperf workload with its own batching, for benchmarks/serve_vs_offline.py.

Usage: python benchmarks/litserve_server.py SPEC PORT MAX_BATCH BATCH_TIMEOUT_S [THREADS]
Requests: {"inputs": [{"b64": base64 of the raw little-endian tensor, "dtype": "float32", "shape": [...]}]}.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import litserve as ls
import numpy as np
import torch

SPEC, PORT, MAX_BATCH, TIMEOUT_S = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
THREADS = int(sys.argv[5]) if len(sys.argv) > 5 else None


class WorkloadAPI(ls.LitAPI):
    def setup(self, device: str) -> None:
        from dlperf.workload.loader import load_workload

        if THREADS:
            torch.set_num_threads(THREADS)
        self.model = load_workload(SPEC).build_model().eval()

    def decode_request(self, request):  # LitServe reads the annotation
        # (an annotated dict makes FastAPI expect a query parameter), so none here
        return [torch.from_numpy(np.frombuffer(base64.b64decode(t["b64"]), dtype=t["dtype"])
                                 .reshape(t["shape"]).copy()) for t in request["inputs"]]

    def batch(self, inputs: list[list[torch.Tensor]]) -> list[torch.Tensor]:
        return [torch.cat([x[i] for x in inputs]) for i in range(len(inputs[0]))]

    def predict(self, x: Any) -> torch.Tensor:
        with torch.inference_mode():
            if isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
                return self.model(*x)
            return self.model(*x)

    def unbatch(self, output: torch.Tensor) -> list[torch.Tensor]:
        return list(output.split(1))

    def encode_response(self, output: torch.Tensor) -> dict[str, Any]:
        return {"output": output.numpy().tolist()}


if __name__ == "__main__":
    api = WorkloadAPI(max_batch_size=MAX_BATCH, batch_timeout=TIMEOUT_S)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1, timeout=60)
    server.run(host="127.0.0.1", port=PORT, log_level="warning", generate_client_file=False)
