"""Which manifest records are trained on: too long, too short for the frontend, or too short for
CTC to emit their tokens; each reason counted and logged."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

from asr.config import DataConfig
from asr.features.audio import num_frames
from asr.text import Tokenizer, normalize

__all__ = ["filter_records", "ctc_min_frames", "FILTER_REASONS"]

log = logging.getLogger(__name__)


def ctc_min_frames(tokens: Sequence[int]) -> int:
    """Fewest encoder frames a CTC alignment of ``tokens`` needs: one per token plus a blank
    between each pair of equal neighbours."""
    return len(tokens) + sum(1 for a, b in zip(tokens, tokens[1:], strict=False) if a == b)


FILTER_REASONS = {
    "too_long": "longer than data.max_duration",
    "too_short": "too short for the model's frontend",
    "empty_text": "empty transcript after normalisation",
    "too_many_tokens": "more tokens than encoder frames (CTC cannot align them)",
}


def filter_records(
    records: Sequence[dict[str, Any]],
    tokenizer: Tokenizer,
    data_cfg: DataConfig,
    *,
    min_input_frames: int = 1,
    encoder_lengths: Callable[[torch.Tensor], torch.Tensor] | None = None,
    speed_perturb: Sequence[float] = (),
    what: str = "data",
) -> tuple[list[dict[str, Any]], Counter]:
    """Drop utterances the model cannot use; log and return the count per reason.

    Reasons: longer than ``data_cfg.max_duration``; fewer fbank frames than ``min_input_frames``;
    empty text after normalisation; more CTC-required frames (tokens plus repeats) than the
    encoder yields (``encoder_lengths`` maps fbank frame counts to encoder frame counts, e.g.
    ``model.encoder_lengths``). With ``speed_perturb`` factors the fastest version must fit.
    """
    sr = data_cfg.sample_rate
    fastest = max([1.0, *speed_perturb])
    frames = torch.tensor(
        [num_frames(int(r["duration"] * sr / fastest), sr) for r in records], dtype=torch.long
    )  # (N,) fbank frames of the fastest version
    enc = encoder_lengths(frames) if encoder_lengths is not None and len(records) else frames  # (N,)
    kept: list[dict[str, Any]] = []
    counts: Counter = Counter()
    for rec, n_frames, n_enc in zip(records, frames.tolist(), enc.tolist(), strict=True):
        text = normalize(rec["text"], data_cfg.normalizer)
        if rec["duration"] > data_cfg.max_duration:
            reason = "too_long"
        elif n_frames < min_input_frames:
            reason = "too_short"
        elif not text:
            reason = "empty_text"
        elif ctc_min_frames(tokenizer.encode(text)) > n_enc:
            reason = "too_many_tokens"
        else:
            kept.append(rec)
            continue
        counts[reason] += 1
        log.debug("%s: dropping %s (%s)", what, rec["id"], FILTER_REASONS[reason])
    if counts:
        detail = ", ".join(f"{n} {FILTER_REASONS[r]}" for r, n in counts.items())
        log.warning("%s: kept %d of %d utterances; dropped %s", what, len(kept), len(records), detail)
    else:
        log.info("%s: kept all %d utterances", what, len(records))
    return kept, counts
