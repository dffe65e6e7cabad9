"""A causal Transformer language model over the ASR model's SentencePiece ids.

It is the ASR decoder without its encoder: token embedding, sinusoidal positions, the decoder's own
:class:`~asr.model.transformer.DecoderLayer` blocks built with ``cross=False``, a final LayerNorm
(pre-norm) and an output layer. Sentences are ``<sos/eos> y_1 .. y_n`` in, ``y_1 .. y_n <sos/eos>``
out, as in ESPnet. :meth:`step` scores one token per hypothesis with a key/value cache.

ESPnet's TransformerLM is the same network with a smaller embedding mapped to ``d_model`` by its
"linear" input layer (Linear, LayerNorm with PyTorch's eps, dropout, ReLU) and, by default, no
positional encoding: ``lm.embed_dim`` and ``lm.positions: none`` select that form.
"""

from __future__ import annotations

import torch
from torch import nn

from asr.lm.config import LMConfig
from asr.model import fast
from asr.model.attention import SinusoidalPositions, causal_keep_mask
from asr.model.fast import Linear
from asr.model.kv_cache import KVCache
from asr.model.transformer import DecoderLayer

__all__ = ["TransformerLM"]


class TransformerLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        d, pre = cfg.d_model, cfg.norm == "pre"
        self.vocab_size = cfg.vocab_size
        self.sos_id = self.eos_id = cfg.vocab_size - 1
        e = cfg.embed_dim or d
        self.embed = nn.Embedding(cfg.vocab_size, e)
        nn.init.normal_(self.embed.weight, std=e**-0.5)
        self.input_layer = nn.Sequential(Linear(e, d), nn.LayerNorm(d), nn.Dropout(cfg.dropout), nn.ReLU()) if (
            cfg.embed_dim) else None  # fmt: skip
        self.pos = SinusoidalPositions(d, cfg.dropout) if cfg.positions == "sinusoidal" else None
        self.layers = nn.ModuleList(
            DecoderLayer(d, cfg.heads, cfg.ffn_dim, cfg.dropout, pre, cfg.layer_norm_eps, cross=False)
            for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if pre else nn.Identity()
        self.output = None if cfg.tie_output else Linear(d, cfg.vocab_size)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        return fast.linear(x, self.embed.weight) if self.output is None else self.output(x)  # (.., V)

    def _input(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        x = self.embed(tokens)  # (B, U, E)
        if self.input_layer is not None:
            x = self.input_layer(x)  # (B, U, D)
        return x if self.pos is None else self.pos(x, offset)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, U, V) of the next token after each prefix of ``tokens`` (B, U) (sos first;
        padding after a sentence's end only affects positions after it)."""
        x = self._input(tokens)  # (B, U, D)
        keep = causal_keep_mask(tokens.shape[1], tokens.device)
        for layer in self.layers:
            x = layer(x, keep)
        return self._logits(x)

    def init_cache(self, n: int, device: torch.device | None = None) -> KVCache:
        """The empty cache of ``n`` hypotheses (nothing seen yet): the decoder's KV cache."""
        return KVCache(len(self.layers))

    def step(self, tokens: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, KVCache]:
        """Log-probabilities (N, V) of the token after ``tokens`` (N,), the newest of each
        hypothesis; the cache grows by that token in place (and is returned)."""
        x = self._input(tokens.unsqueeze(1), cache.length)  # (N, 1, D)
        for layer, slot in zip(self.layers, cache.slots(), strict=True):
            x = layer(x, None, past=slot)
        cache.advance()
        return torch.log_softmax(self._logits(x[:, 0]).float(), dim=-1), cache
