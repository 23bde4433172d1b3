"""Tiny workloads for the engine pass tests: a conv net, a two-output model, an attention block."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlperf.workload.base import EvalSpec, Workload


class TinyCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(16, 32)
        self.a = nn.Linear(32, 4)
        self.b = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.body(x))
        return self.a(h), self.b(h)


class GruTagger(nn.Module):
    """A bidirectional GRU over token ids with a small linear head: nearly all its weights are in the GRU."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.gru = nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.head = nn.Linear(48, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.emb(ids))
        return self.head(out)


class TinyBlock(nn.Module):
    """One pre-norm attention + feed-forward block over token ids, mean-pooled: a tiny transformer."""

    def __init__(self, vocab: int = 100, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.heads = heads

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -1e4
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + bias, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        x = x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))
        m = mask[..., None].to(x.dtype)
        return (x * m).sum(1) / m.sum(1)


def _seeded(cls: type[nn.Module]) -> Any:
    def make() -> nn.Module:
        torch.manual_seed(0)
        return cls()

    return make


def tiny_cnn() -> Workload:
    def inputs(b: int) -> tuple[Any, ...]:
        return (torch.randn(b, 3, 16, 16, generator=torch.Generator().manual_seed(b)),)

    return Workload("tiny-cnn", _seeded(TinyCnn), inputs, kind="cnn", input_names=("image",),
                    output_names=("logits",))


def two_heads() -> Workload:
    def inputs(b: int) -> tuple[Any, ...]:
        return (torch.randn(b, 16, generator=torch.Generator().manual_seed(b)),)

    return Workload("two-heads", _seeded(TwoHeads), inputs, output_names=("a", "b"))


def gru_tagger() -> Workload:
    def inputs(b: int) -> tuple[Any, ...]:
        return (torch.randint(0, 50, (b, 12), generator=torch.Generator().manual_seed(b)),)

    return Workload("gru-tagger", _seeded(GruTagger), inputs)


def tiny_transformer(with_eval: bool = True) -> Workload:
    def inputs(b: int, seed: int = 0) -> tuple[Any, ...]:
        g = torch.Generator().manual_seed(1000 * seed + b)
        ids = torch.randint(0, 100, (b, 12), generator=g)
        mask = torch.ones(b, 12, dtype=torch.int64)
        mask[:, 9:] = 0
        return ids, mask

    def calibration() -> Any:
        return [inputs(8, seed=s) for s in range(1, 5)]

    reference = _seeded(TinyBlock)().eval()
    eval_inputs = inputs(16, seed=99)
    with torch.inference_mode():
        ref_out = reference(*eval_inputs)

    def evaluate(predict: Any) -> float:
        with torch.inference_mode():
            out = predict(*eval_inputs)
        return float(torch.nn.functional.cosine_similarity(out, ref_out, dim=1).mean())

    spec = EvalSpec(evaluate, "fidelity", calibration_inputs=calibration) if with_eval else None
    return Workload("tiny-transformer", _seeded(TinyBlock), lambda b: inputs(b), eval=spec, kind="transformer",
                    input_names=("input_ids", "attention_mask"), output_names=("embedding",))


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder with a padding mask: in eval mode without gradients its fast path runs nested-tensor
    operators, which OpenVINO's PyTorch frontend has no conversion rule for."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, 1)
        self.emb = nn.Embedding(20, 16)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.enc(self.emb(ids), src_key_padding_mask=mask == 0)
        return (h * mask.unsqueeze(-1)).sum(1)


def padded_inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(batch)
    lengths = torch.randint(2, 7, (batch,), generator=g)
    mask = (torch.arange(6)[None, :] < lengths[:, None]).long()
    return torch.randint(1, 20, (batch, 6), generator=g) * mask, mask
