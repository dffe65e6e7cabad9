"""Perplexity of an LM on text: per token (every predicted id, eos included) and per word.

Per-word perplexity spreads the same total log-likelihood over the words plus one end of sentence
per sentence (the usual convention, so it compares across tokenizers): ``exp(NLL / (words + sentences))``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from asr.lm.data import read_sentences
from asr.lm.directory import LanguageModel
from asr.lm.model import LMLoss
from asr.text import normalize

__all__ = ["Perplexity", "perplexity"]


@dataclass
class Perplexity:
    sentences: int
    words: int
    tokens: int  # predicted ids, one eos per sentence included
    nll: float  # total negative log-likelihood, nats

    @property
    def per_token(self) -> float:
        return math.exp(self.nll / max(self.tokens, 1))

    @property
    def per_word(self) -> float:
        return math.exp(self.nll / max(self.words + self.sentences, 1))

    def summary(self) -> str:
        return (f"{self.sentences} sentences, {self.words} words, {self.tokens} tokens: perplexity "
                f"{self.per_token:.2f} per token, {self.per_word:.2f} per word")  # fmt: skip


@torch.inference_mode()
def perplexity(lm: LanguageModel, paths: Sequence[str | os.PathLike], batch_size: int = 64,
               quantized: bool = False) -> Perplexity:  # fmt: skip
    """Perplexity of ``lm`` on the sentences of ``paths`` (text files or manifests), normalised and
    tokenised as in training (``lm.config.data.normalizer``, the LM's tokenizer); ``quantized``: of
    its copy with int8 products (``asr.lm.quantize``), the network ``--quantize-lm`` fuses."""
    if lm.tokenizer is None:
        raise ValueError(f"{lm.path}: the LM directory has no tokenizer.model; it is needed to read text")
    texts = [t for p in paths for t in (normalize(s, lm.config.data.normalizer) for s in read_sentences(p)) if t]
    if not texts:
        raise ValueError(f"{', '.join(map(str, paths))}: no sentences")
    loss = LMLoss(lm.network(quantized)).eval()
    dev = next(lm.model.parameters()).device
    nll = 0.0
    tokens = 0
    for i in range(0, len(texts), batch_size):
        ids = [torch.tensor(lm.tokenizer.encode(t), dtype=torch.long) for t in texts[i : i + batch_size]]
        lens = torch.tensor([len(x) for x in ids])
        padded = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True).to(dev)
        out = loss(padded, lens.to(dev))
        nll += float(out["nll"])
        tokens += int(out["num_tokens"])
    return Perplexity(len(texts), sum(len(t.split()) for t in texts), tokens, nll)
