"""A tiny learnable training workload for the train tests (a few ms per step on one thread)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlperf.workload.base import TrainSpec, Workload

FEATURES = 16
HIDDEN = 32
CLASSES = 4


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def _loader(batch_size: int, **kwargs: Any) -> Any:
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, FEATURES, generator=g)
    y = x[:, :CLASSES].argmax(dim=1)
    kwargs.setdefault("generator", torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, drop_last=True, **kwargs)


def tiny(lr: float = 0.1, optimizer: str = "sgd", batch_size: int = 32) -> Workload:
    def make_optimizer(params: Any) -> torch.optim.Optimizer:
        if optimizer == "adam":
            return torch.optim.Adam(params, lr=lr)
        return torch.optim.SGD(params, lr=lr)

    return Workload(
        name="tiny",
        make_model=_model,
        make_inputs=lambda b: (torch.randn(b, FEATURES),),
        train=TrainSpec(make_loader=_loader, loss_fn=nn.functional.cross_entropy, make_optimizer=make_optimizer,
                        batch_size=batch_size),
        kind="mlp",
    )


def forward_flops(batch: int) -> int:
    """FLOPs FlopCounterMode counts for one training step of the tiny model (no input gradient)."""
    first = 2 * batch * FEATURES * HIDDEN
    second = 2 * batch * HIDDEN * CLASSES
    return first * 2 + second * 3


BLOCK_WIDTH = 128


def _block(width_in: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width_in, BLOCK_WIDTH), nn.ReLU(), nn.Linear(BLOCK_WIDTH, BLOCK_WIDTH), nn.ReLU())


def blocks(batch_size: int = 64) -> Workload:
    """Two multi-layer blocks and a head: the shape activation checkpointing saves memory on."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(_block(FEATURES), _block(BLOCK_WIDTH), nn.Linear(BLOCK_WIDTH, CLASSES))

    return Workload(
        name="blocks",
        make_model=model,
        make_inputs=lambda b: (torch.randn(b, FEATURES),),
        train=TrainSpec(make_loader=_loader, loss_fn=nn.functional.cross_entropy,
                        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1), batch_size=batch_size),
        kind="mlp",
    )


def conv(batch_size: int = 32) -> Workload:
    """A one-convolution model on 2-channel 8x8 images: the shape the channels_last knob acts on (with one channel,
    the default layout is channels_last too)."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, CLASSES))

    def loader(batch_size: int, **kwargs: Any) -> Any:
        from torch.utils.data import DataLoader, TensorDataset

        x = torch.randn(128, 2, 8, 8, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x[:, 0, 0, :CLASSES].argmax(dim=1)), batch_size=batch_size, drop_last=True,
                          **kwargs)

    return Workload(
        name="conv",
        make_model=model,
        make_inputs=lambda b: (torch.randn(b, 2, 8, 8),),
        train=TrainSpec(make_loader=loader, loss_fn=nn.functional.cross_entropy,
                        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1), batch_size=batch_size),
        kind="cnn",
    )


VOCAB = 16
SEQ = 16
WIDTH = 32


class _CharLM(nn.Module):
    """A character-level causal transformer LM: embedding, a 2-layer `nn.TransformerEncoder`, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 2, 4 * WIDTH, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x), mask=self.mask, is_causal=True)).flatten(0, 1)


def char_lm(batch_size: int = 16) -> Workload:
    """`_CharLM` on sequences of a repeating pattern (learnable), next-character targets."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return _CharLM()

    def loader(batch_size: int, **kwargs: Any) -> Any:
        from torch.utils.data import DataLoader, TensorDataset

        text = torch.randint(0, VOCAB, (128, SEQ + 1), generator=torch.Generator().manual_seed(0)) % 7
        kwargs.setdefault("generator", torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(text[:, :-1], text[:, 1:]), batch_size=batch_size, shuffle=True,
                          drop_last=True, **kwargs)

    return Workload(
        name="char-lm",
        make_model=model,
        make_inputs=lambda b: (torch.randint(0, VOCAB, (b, SEQ)),),
        train=TrainSpec(make_loader=loader, loss_fn=lambda out, y: nn.functional.cross_entropy(out, y.flatten()),
                        make_optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3), batch_size=batch_size),
        kind="transformer",
    )


class _MaskedClassifier(nn.Module):
    """Token ids and their attention mask in, a class out: the mean of the unmasked tokens' embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        kept = mask.unsqueeze(-1).to(torch.float32)
        return self.head((self.embed(ids) * kept).sum(1) / kept.sum(1).clamp(min=1.0))


def padded(batch_size: int = 8, count: bool = True) -> Workload:
    """`_MaskedClassifier` on padded sequences: row i of each batch has (i % SEQ) + 1 real tokens, the rest padding.
    `count=True` counts the real ones (`TrainSpec.count_tokens`, the mask's sum)."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return _MaskedClassifier()

    def loader(batch_size: int, **kwargs: Any) -> Any:
        g = torch.Generator().manual_seed(0)
        batches = []
        for _ in range(8):
            ids = torch.randint(1, VOCAB, (batch_size, SEQ), generator=g)
            mask = (torch.arange(SEQ) <= (torch.arange(batch_size) % SEQ).unsqueeze(1)).to(torch.int64)
            batches.append(((ids * mask, mask), ids[:, 0] % CLASSES))
        return batches

    return Workload(
        name="padded",
        make_model=model,
        make_inputs=lambda b: (torch.randint(1, VOCAB, (b, SEQ)), torch.ones(b, SEQ, dtype=torch.int64)),
        train=TrainSpec(make_loader=loader, loss_fn=nn.functional.cross_entropy,
                        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1), batch_size=batch_size,
                        count_tokens=(lambda inputs: int(inputs[1].sum())) if count else None),
        kind="transformer",
    )


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(BLOCK_WIDTH, 4 * BLOCK_WIDTH), nn.Linear(4 * BLOCK_WIDTH, BLOCK_WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class _Encoder(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Residual() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class _Backbone(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.stem = nn.Linear(FEATURES, BLOCK_WIDTH)
        self.encoder = _Encoder(depth)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.stem(x))


class _Nested(nn.Module):
    """A stack of residual blocks three levels down (backbone.encoder.layers), and a head."""

    def __init__(self, depth: int = 6) -> None:
        super().__init__()
        self.backbone = _Backbone(depth)
        self.head = nn.Linear(BLOCK_WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def nested(batch_size: int = 64) -> Workload:
    """`_Nested` on the tiny workload's data: the stack activation checkpointing has to find below the top level."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return _Nested()

    return Workload(
        name="nested",
        make_model=model,
        make_inputs=lambda b: (torch.randn(b, FEATURES),),
        train=TrainSpec(make_loader=_loader, loss_fn=nn.functional.cross_entropy,
                        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1), batch_size=batch_size),
        kind="mlp",
    )
