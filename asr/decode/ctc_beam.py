"""CTC prefix beam search (frame-synchronous) and attention rescoring of its n-best, as in WeNet."""

from __future__ import annotations

import math

import torch

from ..model.asr_model import BLANK_ID
from .beam_search import Hypothesis
from .ctc_prefix_score import NEG_INF

__all__ = ["ctc_prefix_beam_search", "attention_rescoring"]



def _logadd(*xs: float) -> float:
    m = max(xs)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log(sum(math.exp(x - m) for x in xs))


def _add(table: dict[tuple[int, ...], list[float]], prefix: tuple[int, ...], pb: float, pnb: float) -> None:
    cur = table.setdefault(prefix, [NEG_INF, NEG_INF])
    cur[0] = _logadd(cur[0], pb)
    cur[1] = _logadd(cur[1], pnb)


def _prefix_beam_one(lp: torch.Tensor, beam: int) -> list[Hypothesis]:
    """One utterance, log-probs (T, V): prefixes with (log p ending in blank, ending in non-blank)."""
    hyps: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, NEG_INF)}
    top_lp, top_ids = lp.topk(min(beam, lp.shape[1]), dim=-1)  # prune each frame to its `beam` best tokens
    for frame_lp, frame_ids in zip(top_lp.tolist(), top_ids.tolist(), strict=True):
        nxt: dict[tuple[int, ...], list[float]] = {}
        for prefix, (pb, pnb) in hyps.items():
            last = prefix[-1] if prefix else None
            for p, s in zip(frame_lp, frame_ids, strict=True):
                if s == BLANK_ID:
                    _add(nxt, prefix, _logadd(pb, pnb) + p, NEG_INF)
                elif s == last:
                    _add(nxt, prefix, NEG_INF, pnb + p)  # repeat merged into the same token
                    _add(nxt, prefix + (s,), NEG_INF, pb + p)  # a blank separated the two: a new token
                else:
                    _add(nxt, prefix + (s,), NEG_INF, _logadd(pb, pnb) + p)
        ranked = sorted(nxt.items(), key=lambda kv: _logadd(*kv[1]), reverse=True)[:beam]
        hyps = {k: (v[0], v[1]) for k, v in ranked}
    return [Hypothesis(list(k), _logadd(*v)) for k, v in hyps.items()]


@torch.inference_mode()
def ctc_prefix_beam_search(log_probs: torch.Tensor, lens: torch.Tensor, beam_size: int = 10) -> list[list[Hypothesis]]:
    """CTC prefix beam search over log-probs (B, T, V); the n-best of each utterance, best first,
    scored by log P_ctc(prefix) (all its alignments summed)."""
    lp = log_probs.float().cpu()
    return [_prefix_beam_one(lp[i, : int(n)], beam_size) for i, n in enumerate(lens.tolist())]


@torch.inference_mode()
def attention_rescoring(
    model,
    memory: torch.Tensor,
    mem_lens: torch.Tensor,
    nbest: list[list[Hypothesis]],
    ctc_weight: float = 0.3,
    length_bonus: float = 0.0,
) -> list[Hypothesis]:
    """Rescore each utterance's CTC n-best with the attention decoder, all hypotheses in one
    teacher-forced call: ``(1 - ctc_weight) * log p_att(y, eos) + ctc_weight * log p_ctc(y)``."""
    if model.decoder is None:
        raise ValueError("attention_rescoring: the model has no attention decoder (decoder_layers=0)")
    dev = memory.device
    owner = [i for i, hyps in enumerate(nbest) for _ in hyps]
    flat = [h for hyps in nbest for h in hyps]
    if not flat:
        return [Hypothesis([], NEG_INF) for _ in nbest]
    token_lens = torch.tensor([len(h.tokens) for h in flat], device=dev)
    tokens = torch.zeros(len(flat), max(1, int(token_lens.max())), dtype=torch.long, device=dev)  # (H, U)
    for j, h in enumerate(flat):
        tokens[j, : len(h.tokens)] = torch.tensor(h.tokens, dtype=torch.long)
    idx = torch.tensor(owner, device=dev)
    ys_in, ys_out = model.decoder_io(tokens, token_lens)  # (H, U + 1) each; IGNORE_ID after eos
    logits = model.decoder(ys_in, memory[idx], mem_lens[idx]).float()  # (H, U + 1, V)
    lp = torch.log_softmax(logits, dim=-1)
    valid = ys_out >= 0
    att = lp.gather(2, ys_out.clamp_min(0).unsqueeze(2)).squeeze(2).masked_fill(~valid, 0.0).sum(1)  # (H,)
    best: list[Hypothesis | None] = [None] * len(nbest)
    for j, h in enumerate(flat):
        s = (1 - ctc_weight) * float(att[j]) + ctc_weight * h.score + length_bonus * (len(h.tokens) + 1)
        i = owner[j]
        if best[i] is None or s > best[i].score:
            best[i] = Hypothesis(h.tokens, s)
    return [h if h is not None else Hypothesis([], NEG_INF) for h in best]
