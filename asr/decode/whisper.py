"""What the search does under Whisper's rules (``decode.rules: whisper``), beside the one beam search.

- the prompt each utterance starts from (:meth:`WhisperPrompt.build`), with the spoken language
  detected first where a multilingual model is not told it: the decoder's most likely language
  token after start-of-transcript, as openai-whisper's ``detect_language``;
- the logit filters, in openai-whisper's order, applied to the decoder's logits before the softmax
  (:func:`filter_logits`): suppressed tokens, no blank or end of text first, and with timestamps
  the timestamp rules (times in pairs, never decreasing, the first within 1 s, and a timestamp
  whenever timestamps together are likelier than any text token).

All of it is vectorised over the rows of a batch: no Python loop over hypotheses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["WhisperPrompt", "filter_logits", "detect_language"]

MAX_INITIAL_TIMESTAMP = 50  # openai-whisper's max_initial_timestamp 1.0 s, in 20 ms steps


@dataclass
class WhisperPrompt:
    """Per utterance: the prompt tokens (B, P); for every row: what the filters need."""

    tokens: torch.Tensor  # (B, P) start of transcript [, language, task] [, no-timestamps]
    languages: list[str]  # each utterance's language
    suppress: torch.Tensor  # (S,) ids never emitted
    suppress_at_start: torch.Tensor  # ids never emitted first
    timestamps: bool
    timestamp_begin: int
    no_timestamps: int
    eot: int

    @classmethod
    @torch.inference_mode()
    def build(cls, model, memory, mem_lens, tokenizer, language: str = "", task: str = "transcribe",
              timestamps: bool = False) -> WhisperPrompt:
        b, dev = memory.shape[0], memory.device
        if tokenizer.multilingual and not language:
            langs = detect_language(model, memory, mem_lens, tokenizer)
        else:
            langs = [language or "en"] * b  # English-only models: English (their prompt names no language)
        prompts = [tokenizer.prompt(lang, task, timestamps) for lang in langs]
        return cls(
            tokens=torch.tensor(prompts, dtype=torch.long, device=dev),
            languages=langs,
            suppress=torch.tensor(tokenizer.suppress_tokens, dtype=torch.long, device=dev),
            suppress_at_start=torch.tensor(tokenizer.suppress_at_start, dtype=torch.long, device=dev),
            timestamps=timestamps,
            timestamp_begin=tokenizer.timestamp_begin,
            no_timestamps=tokenizer.no_timestamps,
            eot=tokenizer.eot,
        )

    def select(self, index: torch.Tensor) -> WhisperPrompt:
        """The prompts of utterances ``index`` only."""
        langs = [self.languages[i] for i in index.tolist()]
        return WhisperPrompt(self.tokens[index], langs, self.suppress, self.suppress_at_start, self.timestamps,
                             self.timestamp_begin, self.no_timestamps, self.eot)


@torch.inference_mode()
def detect_language(model, memory: torch.Tensor, mem_lens: torch.Tensor, tokenizer) -> list[str]:
    """The most likely language token after start-of-transcript, for each utterance (B, S, D)."""
    cache = model.decoder.init_cache(memory, mem_lens)
    sot = torch.full((memory.shape[0],), tokenizer.sot, dtype=torch.long, device=memory.device)
    logits, _ = model.decoder.step(sot, cache)  # (B, V)
    ids = torch.tensor(tokenizer.language_tokens, device=memory.device)
    best = logits.float()[:, ids].argmax(-1)
    return [tokenizer.languages[i] for i in best.tolist()]


def filter_logits(logits: torch.Tensor, seqs: torch.Tensor | None, step: int, p: WhisperPrompt) -> torch.Tensor:
    """Whisper's logit filters on logits (N, V) in place; ``seqs`` (N, step): the tokens each row has
    emitted so far (None at the first step, where a row may stand for several hypotheses)."""
    ninf = -math.inf
    logits[:, p.suppress] = ninf
    if step == 0:
        logits[:, p.suppress_at_start] = ninf
    if not p.timestamps:
        return logits
    tb = p.timestamp_begin
    logits[:, p.no_timestamps] = ninf
    if step == 0:  # a timestamp first, at most MAX_INITIAL_TIMESTAMP
        logits[:, :tb] = ninf
        logits[:, tb + MAX_INITIAL_TIMESTAMP + 1 :] = ninf
    else:
        assert seqs is not None
        v = logits.shape[1]
        ids = torch.arange(v, device=logits.device)
        is_ts = seqs >= tb  # (N, step)
        last = is_ts[:, -1]
        penult = is_ts[:, -2] if step >= 2 else torch.ones_like(last)
        logits.masked_fill_((last & penult).unsqueeze(1) & (ids >= tb), ninf)  # a pair is closed: text next
        logits.masked_fill_((last & ~penult).unsqueeze(1) & (ids < p.eot), ninf)  # an open pair: a time or eot
        pos = torch.arange(step, device=seqs.device)
        at = torch.where(is_ts, pos, -1).max(1).values  # (N,) position of the last timestamp, -1: none
        ts_last = seqs.gather(1, at.clamp_min(0).unsqueeze(1)).squeeze(1)
        upto = torch.where(last & ~penult, ts_last, ts_last + 1)  # times never decrease; a segment is never empty
        logits.masked_fill_((at >= 0).unsqueeze(1) & (ids >= tb) & (ids < upto.unsqueeze(1)), ninf)
    lp = torch.log_softmax(logits.float(), dim=-1)
    ts_likelier = lp[:, tb:].logsumexp(-1) > lp[:, :tb].max(-1).values  # (N,)
    logits.masked_fill_(ts_likelier.unsqueeze(1) & (torch.arange(logits.shape[1], device=logits.device) < tb), ninf)
    return logits
