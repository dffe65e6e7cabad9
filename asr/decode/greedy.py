"""Greedy search: attention decoder (batched, KV cache) and CTC (best path)."""

from __future__ import annotations

import math

import torch

from asr.model.asr_model import BLANK_ID

__all__ = ["greedy_search", "ctc_greedy_search", "max_lengths"]


def max_lengths(
    mem_lens: torch.Tensor, max_len: int | None = None, max_len_ratio: float = 1.0, round_up: bool = True
) -> torch.Tensor:
    """Per-utterance output limit (B,): ``max_len`` when given, else ceil(ratio * encoder length)
    (``round_up=False``: ESPnet's int(), at least 1; ratio 0, ESPnet's convention: the encoder length).

    Derived from each utterance's own encoder length, so a batch never changes a result.
    """
    if max_len is not None:
        return torch.full_like(mem_lens, max_len)
    if max_len_ratio == 0:
        return mem_lens.clamp_min(1)
    scaled = mem_lens.double() * max_len_ratio
    return (torch.ceil(scaled) if round_up else torch.floor(scaled)).long().clamp_min(1)


@torch.inference_mode()
def greedy_search(
    model,
    memory: torch.Tensor,
    mem_lens: torch.Tensor,
    max_len: int | None = None,
    min_len: int = 0,
    max_len_ratio: float = 1.0,
) -> list[list[int]]:
    """Most likely token at each step from the attention decoder, for a whole batch at once.

    memory (B, S, D), mem_lens (B,). Returns token ids per utterance (no sos/eos, no blank).
    Cross-attention keys/values are computed once; the self-attention cache grows one token a
    step; finished utterances leave the batch. ``min_len`` suppresses eos until that many tokens
    (for benchmarks); ``max_len`` defaults to the encoder length times ``max_len_ratio``.
    """
    decoder = model.decoder
    if decoder is None:
        raise ValueError("greedy_search: the model has no attention decoder (decoder_layers=0); use ctc_greedy_search")
    b = memory.shape[0]
    limits = max_lengths(mem_lens, max_len, max_len_ratio)  # (B,)
    results: list[list[int]] = [[] for _ in range(b)]
    active = torch.nonzero(mem_lens > 0).flatten()  # utterance index of each live row, (N,)
    if active.numel() == 0:
        return results
    cache = decoder.init_cache(memory[active], mem_lens[active])
    start = torch.tensor(model.start_tokens, device=memory.device).expand(active.numel(), -1)  # (N, P): sos, or a
    cache = decoder.feed(start[:, :-1], cache)  # fine-tuned Whisper's start-of-transcript sequence
    tokens = start[:, -1]  # (N,)
    limits = limits[active]
    step = 0
    while active.numel() > 0:
        logits, cache = decoder.step(tokens, cache)  # (N, V)
        logits[:, model.blank_id] = -math.inf  # blank is never a decoder target
        if step < min_len:
            logits[:, model.eos_id] = -math.inf
        tokens = logits.argmax(-1)  # (N,)
        step += 1
        ended = tokens == model.eos_id
        for i, tok in zip(active.tolist(), tokens.tolist(), strict=True):
            if tok != model.eos_id:
                results[i].append(tok)
        done = ended | (limits <= step)
        if bool(done.any()):
            keep = torch.nonzero(~done).flatten()
            active, tokens, limits = active[keep], tokens[keep], limits[keep]
            if keep.numel():
                cache = cache.index_select(keep)
    return results


def ctc_greedy_search(log_probs: torch.Tensor, lens: torch.Tensor, blank: int = BLANK_ID) -> list[list[int]]:
    """Best path of CTC log-probs (B, T, V): argmax per frame, merge repeats, drop blanks."""
    best = log_probs.argmax(-1)  # (B, T)
    t = best.shape[1]
    keep = torch.arange(t, device=best.device) < lens.unsqueeze(1)  # (B, T)
    changed = torch.ones_like(keep)
    changed[:, 1:] = best[:, 1:] != best[:, :-1]
    keep &= changed & (best != blank)
    return [row[k].tolist() for row, k in zip(best, keep, strict=True)]
