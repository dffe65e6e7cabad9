"""The state a language model keeps between steps of incremental scoring, for N hypotheses.

A tuple of tensors whose dimension ``dim`` runs over hypotheses: the LSTM's hidden and cell
states, (layers, N, H), dim 1. The Transformer LM keeps the decoder's
:class:`~asr.model.kv_cache.KVCache` instead; both reorder with ``index_select``, so beam search
does not need to know which LM it has.
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
