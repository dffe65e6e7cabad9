"""Transformer encoder and decoder layers, the decoder's KV cache, and the two stacks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from asr.model import fast
from asr.model.attention import (
    MultiHeadAttention,
    SinusoidalPositions,
    TablePositions,
    causal_keep_mask,
    lengths_to_keep_mask,
)
from asr.model.fast import Dropout, FeedForward, Linear
from asr.model.kv_cache import KVCache, KVSlot

__all__ = ["Encoder", "Decoder", "DecoderCache", "DecoderLayer"]


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each with a residual and LayerNorm (before: pre-norm; after: post-norm)."""

    def __init__(
        self, d_model: int, heads: int, ffn_dim: int, dropout: float, pre_norm: bool, eps: float = 1e-5,
        activation: str = "relu",
    ):
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = MultiHeadAttention(d_model, heads, dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, keep_mask: torch.Tensor | None) -> torch.Tensor:
        """``keep_mask``: (B, 1, 1, T), True on real frames (None: every frame is real)."""
        if self.pre_norm:
            x = x + self.dropout(self.attn(self.norm1(x), keep_mask))
            return x + self.dropout(self.ffn(self.norm2(x), keep_mask))
        x = self.norm1(x + self.dropout(self.attn(x, keep_mask)))
        return self.norm2(x + self.dropout(self.ffn(x, keep_mask)))


class Encoder(nn.Module):
    """Positions, then N encoder layers whose self-attention sees only each utterance's own frames.

    ``eps``: of every LayerNorm (ESPnet's Transformer uses 1e-12, PyTorch's default is 1e-5).
    ``max_len`` > 0: Whisper's positions (a fixed table of that many frames, added unscaled).
    """

    def __init__(
        self, d_model: int, heads: int, ffn_dim: int, layers: int, dropout: float, pre_norm: bool, eps: float = 1e-5,
        activation: str = "relu", max_len: int = 0,
    ):
        super().__init__()
        self.pos = (TablePositions(max_len, d_model, False, dropout, "encoder frames") if max_len
                    else SinusoidalPositions(d_model, dropout))
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, heads, ffn_dim, dropout, pre_norm, eps, activation) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=eps) if pre_norm else nn.Identity()

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:  # (B, T, D), (B,)
        keep = memory_keep_mask(x, lens)  # (B, 1, 1, T) or None
        x = self.pos(x)
        for layer in self.layers:
            x = layer(x, keep)
        return self.norm(x)  # (B, T, D)


def memory_keep_mask(x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor | None:
    """(B, 1, 1, T) attention mask, True on each utterance's frames of x (B, T, ...); None on a CPU
    when no frame is padding (one utterance, or a batch of equal lengths): an all-True mask only
    costs time (SDPA is slower with it). On a GPU the mask is always made (checking would sync)."""
    keep = lengths_to_keep_mask(lens, x.shape[1])[:, None, None, :]
    return None if x.device.type == "cpu" and bool(keep.all()) else keep


@dataclass
class DecoderCache:
    """What incremental decoding keeps between steps, for N hypotheses.

    ``self_kv``: every layer's self-attention keys/values of all tokens so far (written in place);
    ``cross_kv[i]``: layer i's cross-attention keys/values of the encoder output, (N, H, S, d_k),
    computed once; ``memory_keep``: (N, 1, 1, S), True on real encoder frames (None on a CPU when
    no frame is padding, as for one utterance: an all-True mask only costs time). Like its
    ``self_kv``, a cache is consumed by ``step`` and ``index_select``: use the one they return.
    """

    self_kv: KVCache
    cross_kv: list[tuple[torch.Tensor, torch.Tensor]]
    memory_keep: torch.Tensor | None

    @property
    def length(self) -> int:
        return self.self_kv.length

    def index_select(self, index: torch.Tensor, cross_index: torch.Tensor | None = None) -> DecoderCache:
        """Keep (and reorder or repeat) hypotheses ``index``, e.g. the parents of surviving beams.

        ``cross_index`` selects the cross-attention entries separately; by default ``index`` too.
        """
        ci = index if cross_index is None else cross_index
        keep = None if self.memory_keep is None else self.memory_keep[ci]
        cross = DecoderCache(self.self_kv, [(k[ci], v[ci]) for k, v in self.cross_kv], keep)
        return cross.reorder_self(index)

    def reorder_self(self, index: torch.Tensor) -> DecoderCache:
        """Keep (reorder, repeat) self-attention entries ``index``; cross-attention entries stay as they are."""
        return DecoderCache(self.self_kv.index_select(index), self.cross_kv, self.memory_keep)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention on the encoder output, FFN; residual + LayerNorm each.

    ``cross=False`` leaves out the cross-attention block (and its LayerNorm): the causal block of a
    Transformer language model (``asr.lm``), the same code as the decoder's.
    """

    def __init__(
        self, d_model: int, heads: int, ffn_dim: int, dropout: float, pre_norm: bool, eps: float = 1e-5,
        cross: bool = True, activation: str = "relu",
    ):
        super().__init__()
        self.pre_norm = pre_norm
        self.self_attn = MultiHeadAttention(d_model, heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, heads, dropout, cross=True) if cross else None
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model, eps=eps) for _ in range(3 if cross else 2))
        self.dropout = Dropout(dropout)

    def forward(self, x, self_keep, cross_kv=None, memory_keep=None, past: KVSlot | None = None):
        """``past``: this layer's slot of the KV cache when stepping one token at a time."""
        n1, *n2, n3 = self.norms  # n2: [] without cross-attention
        if self.pre_norm:
            x = x + self.dropout(self.self_attn(n1(x), self_keep, past=past))
            if self.cross_attn is not None:
                x = x + self.dropout(self.cross_attn(n2[0](x), memory_keep, kv=cross_kv))
            return x + self.dropout(self.ffn(n3(x)))
        x = n1(x + self.dropout(self.self_attn(x, self_keep, past=past)))
        if self.cross_attn is not None:
            x = n2[0](x + self.dropout(self.cross_attn(x, memory_keep, kv=cross_kv)))
        return n3(x + self.dropout(self.ffn(x)))


class Decoder(nn.Module):
    """Token embedding (tied with the output layer by default), positions, M decoder layers, logits.

    ``tie_output=False`` gives the output layer its own weight and a bias, as ESPnet's decoder has.
    ``max_len`` > 0: Whisper's learned positions (that many rows, added unscaled) instead of sinusoids.
    """

    def __init__(
        self, vocab_size: int, d_model: int, heads: int, ffn_dim: int, layers: int, dropout: float, pre_norm: bool,
        eps: float = 1e-5, tie_output: bool = True, activation: str = "relu", max_len: int = 0,
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        self.pos = (TablePositions(max_len, d_model, True, dropout, "decoder tokens") if max_len
                    else SinusoidalPositions(d_model, dropout))
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, heads, ffn_dim, dropout, pre_norm, eps, activation=activation) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=eps) if pre_norm else nn.Identity()
        self.output = None if tie_output else Linear(d_model, vocab_size)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.output is not None:
            return self.output(self.norm(x))  # (.., V)
        return fast.linear(self.norm(x), self.embed.weight)  # = F.linear: tied output projection, (.., V)

    def init_cache(self, memory: torch.Tensor, memory_lens: torch.Tensor) -> DecoderCache:
        """Cross-attention keys/values of every layer for ``memory`` (N, S, D), computed once, each
        head's contiguous: every step reads them all, mostly from memory rather than cache, and a
        head's keys in one block read faster than every 256 bytes of a (S, 2 x D) row."""
        return DecoderCache(
            self_kv=KVCache(len(self.layers)),
            cross_kv=[tuple(t.contiguous() for t in layer.cross_attn.project_kv(memory)) for layer in self.layers],
            memory_keep=memory_keep_mask(memory, memory_lens),
        )

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_lens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, U, V) for input tokens (B, U) (padding after each sequence's end)."""
        keep = memory_keep_mask(memory, memory_lens)
        x = self.pos(self.embed(tokens))  # (B, U, D)
        self_keep = causal_keep_mask(tokens.shape[1], tokens.device)
        for layer in self.layers:
            x = layer(x, self_keep, layer.cross_attn.project_kv(memory), keep)
        return self.logits(x)

    def feed(self, tokens: torch.Tensor, cache: DecoderCache) -> DecoderCache:
        """Feed ``tokens`` (N, P), a prompt per row, into the cache without computing logits: the
        search then steps from the token after them."""
        for t in range(tokens.shape[1]):
            _, cache = self.step(tokens[:, t], cache, logits=False)
        return cache

    def step(
        self, tokens: torch.Tensor, cache: DecoderCache, logits: bool = True
    ) -> tuple[torch.Tensor | None, DecoderCache]:
        """Logits (N, V) for the next token after ``tokens`` (N,), the newest token of each hypothesis.

        Returns the cache with this token's self-attention keys/values appended (in place).
        ``logits=False`` only feeds the token (a prompt's): no output layer, None for the logits.
        """
        x = self.pos(self.embed(tokens.unsqueeze(1)), cache.length)  # (N, 1, D)
        for layer, past, ckv in zip(self.layers, cache.self_kv.slots(), cache.cross_kv, strict=True):
            x = layer(x, None, ckv, cache.memory_keep, past=past)
        cache.self_kv.advance()
        return (self.logits(x[:, 0]) if logits else None), cache
