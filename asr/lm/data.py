"""Text for LM training: sentences from text files or manifests, normalised and tokenised.

A text file has one sentence a line (``.gz`` read as gzip; a leading utterance id, as in Kaldi's
``text``, is not removed: give a manifest for transcripts); a manifest (``.jsonl``/``.json``) gives
its records' ``"text"``. Every sentence goes through :func:`asr.text.normalize` as the ASR's
transcripts do, so the LM sees the words the recogniser emits. All sentences are held in memory as
int16/int32 id arrays: fine for the LibriSpeech LM corpus (40 M sentences, ~1 G tokens needs a
machine with the memory for it; shard it otherwise).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from asr.text import Tokenizer, normalize

__all__ = ["read_sentences", "TextDataset", "TextBatch", "collate_text", "encode_texts"]

log = logging.getLogger(__name__)


def read_sentences(path: str | os.PathLike) -> Iterator[str]:
    """Raw sentences of a text file (one a line, gzip if ``.gz``) or a manifest's ``"text"`` fields."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such text file or manifest")
    manifest = p.suffix in (".jsonl", ".json")
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if manifest:
                try:
                    yield json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise ValueError(f"{p}:{n}: expected a JSON record with a \"text\" field ({e})") from e
            else:
                yield line


def encode_texts(paths: Sequence[str | os.PathLike], tokenizer: Tokenizer, normalizer: str,
                 max_length: int) -> list[np.ndarray]:  # fmt: skip
    """Normalised, tokenised sentences of ``paths``; empty ones and ones over ``max_length`` ids dropped (logged)."""
    dtype = np.int16 if tokenizer.vocab_size < 2**15 else np.int32
    out: list[np.ndarray] = []
    empty = long = 0
    for path in paths:
        for raw in read_sentences(path):
            text = normalize(raw, normalizer)
            if not text:
                empty += 1
                continue
            ids = tokenizer.encode(text)
            if len(ids) + 1 > max_length:
                long += 1
                continue
            out.append(np.asarray(ids, dtype=dtype))
    if empty or long:
        log.info("%s: %d empty sentences and %d longer than %d tokens dropped", ", ".join(map(str, paths)), empty,
                 long, max_length)  # fmt: skip
    return out


class TextDataset(torch.utils.data.Dataset):
    """Tokenised sentences -> ``{"id", "tokens" (U,)}``; nothing random, so ``set_epoch`` does nothing."""

    def __init__(self, sentences: list[np.ndarray]):
        self.sentences = sentences

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, i: int) -> dict:
        return {"id": str(i), "tokens": torch.from_numpy(self.sentences[i].astype(np.int64))}

    def set_epoch(self, epoch: int) -> None:
        pass


@dataclass
class TextBatch:
    """Sentences padded with 0 (blank, never a target); ``skipped`` is always 0 (text is never unreadable)."""

    ids: list[str]
    tokens: torch.Tensor  # (B, U) long
    token_lens: torch.Tensor  # (B,) long
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.ids)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TextBatch:
        return TextBatch(self.ids, self.tokens.to(device, non_blocking=non_blocking),
                         self.token_lens.to(device, non_blocking=non_blocking))  # fmt: skip

    def pin_memory(self) -> TextBatch:
        return TextBatch(self.ids, self.tokens.pin_memory(), self.token_lens.pin_memory())


def collate_text(items: Sequence[dict]) -> TextBatch:
    if not items:
        return TextBatch([], torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    return TextBatch(
        ids=[it["id"] for it in items],
        tokens=pad_sequence([it["tokens"] for it in items], batch_first=True, padding_value=0),
        token_lens=torch.tensor([it["tokens"].numel() for it in items], dtype=torch.long),
    )
