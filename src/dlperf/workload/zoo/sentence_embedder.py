"""The pooling head of `zoo:minilm`, at module level so a built model pickles (torch.save, spawn workers)."""

from __future__ import annotations

import torch
from torch import nn


class SentenceEmbedder(nn.Module):
    """An encoder's token states, mean-pooled over non-padding tokens, then L2-normalized.

    This is what sentence-transformers' Pooling(mean) + Normalize modules compute.
    """

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        tokens = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        summed = (tokens * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(summed / counts, p=2.0, dim=1)
