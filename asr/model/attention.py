"""Multi-head attention through ``scaled_dot_product_attention``, masks from lengths, positions.

Mask convention everywhere in ``asr.model``: boolean ``keep_mask`` tensors, True where attention
is allowed (SDPA's own convention), broadcastable to (B, heads, L_query, L_key).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from asr.model import fast
from asr.model.fast import Dropout, Linear
from asr.model.kv_cache import KVSlot

__all__ = [
    "MultiHeadAttention", "lengths_to_keep_mask", "causal_keep_mask", "SinusoidalPositions", "TablePositions",
    "whisper_sinusoids",
]


def lengths_to_keep_mask(lens: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths to a (B, max_len) mask, True on real frames."""
    max_len = int(lens.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lens.device) < lens.unsqueeze(1)


def causal_keep_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """(L, L) mask, True where the key position is not after the query position."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class SinusoidalPositions(nn.Module):
    """The original Transformer's positions: sin on even, cos on odd dimensions, base 10000.

    ``forward`` scales its input by sqrt(d_model) and adds the positions from ``offset`` on.
    """

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 5000):
        super().__init__()
        self.d_model = d_model
        self.scale = math.sqrt(d_model)
        self.dropout = Dropout(dropout)
        self.register_buffer("table", self._table(max_len), persistent=False)

    def _table(self, length: int) -> torch.Tensor:
        pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
        inv = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / self.d_model))
        table = torch.zeros(length, self.d_model)
        table[:, 0::2] = torch.sin(pos * inv)
        table[:, 1::2] = torch.cos(pos * inv)
        return table  # (max_len, D)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:  # (B, L, D)
        end = offset + x.shape[1]
        if end > self.table.shape[0]:
            self.table = self._table(max(end, 2 * self.table.shape[0])).to(self.table.device)
        return self.dropout(x * self.scale + self.table[offset:end].to(x.dtype))


def whisper_sinusoids(length: int, d_model: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """Whisper's encoder positions (length, d_model): sines in the first half of the dimensions,
    cosines in the second, timescales from 1 to ``max_timescale`` in d_model / 2 geometric steps."""
    step = math.log(max_timescale) / (d_model // 2 - 1)
    inv = torch.exp(-step * torch.arange(d_model // 2, dtype=torch.float32))
    t = torch.arange(length, dtype=torch.float32).unsqueeze(1) * inv.unsqueeze(0)  # (length, d_model / 2)
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class TablePositions(nn.Module):
    """Whisper's positions: row ``offset + i`` of a table added to frame i, the input unscaled.

    ``learned``: the table is a parameter (the decoder's); else a saved buffer holding
    :func:`whisper_sinusoids` (the encoder's; an imported model brings its own, so it is exact).
    More frames than the table has rows is an error: Whisper reads at most 30 s and 448 tokens.
    """

    def __init__(self, length: int, d_model: int, learned: bool, dropout: float = 0.0, what: str = "positions"):
        super().__init__()
        self.what = what
        self.dropout = Dropout(dropout)
        if learned:
            self.table = nn.Parameter(torch.empty(length, d_model).normal_(std=0.01))
        else:
            self.register_buffer("table", whisper_sinusoids(length, d_model))

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:  # (B, L, D)
        end = offset + x.shape[1]
        if end > self.table.shape[0]:
            raise ValueError(f"{self.what}: {end} positions asked for, the model has {self.table.shape[0]}")
        return self.dropout(x + self.table[offset:end].to(x.dtype))


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention. Self-attention projects Q, K, V with one fused Linear.

    ``past`` (self-attention only, one new token) is this layer's slot of a
    :class:`~asr.model.kv_cache.KVCache`: the token's key and value are stored there and it attends
    to every key and value stored so far, so a decoder grows its cache one step at a time.
    Cross-attention takes precomputed (K, V) of the encoder output from :meth:`project_kv`; when
    they have fewer rows than ``x`` (B' utterances for B = B' x beam hypotheses, utterance-major),
    each utterance's hypotheses attend to its one copy, so beam search never repeats them.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, cross: bool = False):
        super().__init__()
        self.heads = heads
        self.d_k = d_model // heads
        self.cross = cross
        self.dropout = dropout
        if cross:
            self.q = Linear(d_model, d_model)
            self.kv = Linear(d_model, 2 * d_model)
        else:
            self.qkv = Linear(d_model, 3 * d_model)
        self.out = Linear(d_model, d_model)

    def _split(self, x: torch.Tensor, parts: int) -> torch.Tensor:
        b, l, _ = x.shape
        return x.view(b, l, parts, self.heads, self.d_k).permute(2, 0, 3, 1, 4)  # (parts, B, H, L, d_k)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the encoder output, (B, H, S, d_k) each: computed once per utterance."""
        k, v = self._split(self.kv(memory), 2)
        return k, v

    def forward(
        self,
        x: torch.Tensor,
        keep_mask: torch.Tensor | None = None,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
        past: KVSlot | None = None,
    ) -> torch.Tensor:
        b, l, d = x.shape
        if self.cross:
            assert kv is not None, "cross-attention needs the memory's keys and values"
            k, v = kv
            # B' = k.shape[0] utterances; in beam search each has b / B' hypotheses (utterance-major),
            # folded into its query length: (B', H, b / B' x L, d_k), one copy of K/V per utterance
            q = self.q(x).view(k.shape[0], -1, self.heads, self.d_k).transpose(1, 2)
        elif past is not None:  # one new token: its key and value go to the cache, one copy
            qkv = self.qkv(x).view(b, 3, self.heads, self.d_k)  # l == 1
            q = qkv[:, 0].unsqueeze(2)  # (B, H, 1, d_k)
            k, v = past.append(qkv[:, 1:])  # (B, H, t + 1, d_k) each: every token so far
        else:
            q, k, v = self._split(self.qkv(x), 3)
        if k.dtype != q.dtype:  # a CPU KV cache stays fp32 under bf16 autocast (asr.model.kv_cache): fp32 here
            with torch.autocast(q.device.type, enabled=False):
                y = fast.attention(q.to(k.dtype), k, v, keep_mask, 0.0).to(q.dtype)
        else:
            y = fast.attention(q, k, v, keep_mask, self.dropout if self.training else 0.0)  # SDPA: (B, H, L, d_k)
        return self.out(y.transpose(1, 2).reshape(b, l, d))  # (B', H, b / B' x L, d_k) in cross-attention
