"""The state a language model keeps between steps of incremental scoring, for N hypotheses.

One small mechanism for both networks, so beam search reorders it without knowing which LM it
has: a tuple of tensors whose dimension ``dim`` runs over hypotheses (the Transformer's per-layer
keys and values, (N, H, t, d_k), dim 0; the LSTM's hidden and cell states, (layers, N, H), dim 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["LMCache"]


@dataclass(frozen=True)
class LMCache:
    tensors: tuple[torch.Tensor, ...]
    dim: int = 0  # the hypothesis dimension of every tensor

    def index_select(self, index: torch.Tensor) -> LMCache:
        """Keep (reorder, repeat) hypotheses ``index``: e.g. the parents of the surviving beams."""
        return LMCache(tuple(t.index_select(self.dim, index) for t in self.tensors), self.dim)
