"""Beam search over a batch of utterances: all B x beam hypotheses advance in one decoder call.

Joint CTC/attention scoring (Watanabe et al. 2017): a candidate's score is
``(1 - ctc_weight) * log p_att + ctc_weight * (log psi(h + c) - log psi(h))`` plus a length bonus
per token. With CTC, only the ``pre_beam`` best tokens of the decoder (and eos) get CTC prefix
scores, as in ESPnet; ``pre_beam=0`` scores the whole vocabulary.

At each step the 2 x beam best candidates of every utterance are ranked (as in fairseq): an eos
among the first ``beam`` ends a hypothesis, the first ``beam`` non-eos ones continue. An
utterance stops when it has ``beam`` ended hypotheses, when no running hypothesis can beat the
best ended one (scores only fall when there is no length bonus/normalisation), or at its maximum
length (encoder frames x ``max_len_ratio``), where the running hypotheses are ended. Stopped
utterances leave the batch; each utterance's decisions depend on its own rows only, so a result
does not depend on the batch it was decoded in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..model.asr_model import BLANK_ID
from .ctc_prefix_score import CTCPrefixScorer
from .greedy import max_lengths

__all__ = ["Hypothesis", "beam_search"]


@dataclass
class Hypothesis:
    """A finished hypothesis: token ids (no sos/eos) and its score (higher is better).

    ``score`` is the sum of the step scores (length bonus included); with length normalisation
    hypotheses are ranked by ``score / (len(tokens) + 1)``, which is then stored in ``score``.
    """

    tokens: list[int]
    score: float


@torch.inference_mode()
def beam_search(
    model,
    memory: torch.Tensor,
    mem_lens: torch.Tensor,
    beam_size: int = 10,
    ctc_weight: float = 0.0,
    ctc_log_probs: torch.Tensor | None = None,
    length_bonus: float = 0.0,
    length_norm: bool = False,
    max_len: int | None = None,
    min_len: int = 0,
    max_len_ratio: float = 1.0,
    pre_beam: int | None = None,
    nbest: int = 1,
) -> list[list[Hypothesis]]:
    """Batched joint CTC/attention beam search; memory (B, S, D), mem_lens (B,).

    Returns the ``nbest`` best hypotheses of each utterance, best first. ``ctc_log_probs``
    (B, S, V) default to ``model.ctc_log_probs(memory)`` when ``ctc_weight > 0``. ``pre_beam``:
    tokens per hypothesis that get CTC scores (default 1.5 x beam, ESPnet's; 0: all).
    ``min_len`` suppresses eos before that many tokens; ``max_len`` overrides the length limit.
    """
    decoder = model.decoder
    if decoder is None:
        raise ValueError("beam_search: the model has no attention decoder (decoder_layers=0); use a CTC mode")
    if not 0.0 <= ctc_weight < 1.0:
        raise ValueError(f"beam_search: ctc_weight must be in [0, 1), got {ctc_weight} (1.0: use mode ctc_beam)")
    b_total, dev = memory.shape[0], memory.device
    w, v, eos = beam_size, model.vocab_size, model.eos_id
    finished: list[list[Hypothesis]] = [[] for _ in range(b_total)]
    utts = torch.nonzero(mem_lens > 0).flatten()  # original index of each live utterance, (B,)
    if utts.numel() == 0:
        return [[Hypothesis([], 0.0)] for _ in range(b_total)]
    limits = max_lengths(mem_lens, max_len, max_len_ratio)[utts]  # (B,)
    b = utts.numel()

    rows = torch.arange(b, device=dev).repeat_interleave(w)  # utterance (position in utts) of each row, (B*W,)
    # cross-attention K/V once per utterance, shared by its W hypotheses (rows are utterance-major)
    cache = decoder.init_cache(memory[utts], mem_lens[utts])
    scorer = state = None
    if ctc_weight > 0:
        lp = model.ctc_log_probs(memory) if ctc_log_probs is None else ctc_log_probs
        scorer = CTCPrefixScorer(lp[utts], mem_lens[utts], blank=BLANK_ID, eos=eos)
        state = scorer.initial_state(rows)
        k_pre = v if pre_beam == 0 else min(v - 1, pre_beam or max(1, int(1.5 * w)))  # tokens besides eos
    scores = torch.full((b, w), -math.inf, device=dev)  # (B, W) running scores; one live beam at start
    scores[:, 0] = 0.0
    seqs = torch.zeros(b * w, 0, dtype=torch.long, device=dev)  # (B*W, step) tokens so far
    tokens = torch.full((b * w,), model.sos_id, dtype=torch.long, device=dev)
    monotone = length_bonus <= 0 and not length_norm

    step = 0
    while b > 0:
        logits, cache = decoder.step(tokens, cache)  # (B*W, V)
        att = torch.log_softmax(logits.float(), dim=-1)
        att[:, BLANK_ID] = -math.inf  # blank is never a decoder target
        if step < min_len:
            att[:, eos] = -math.inf
        at_limit = (limits <= step).repeat_interleave(w)  # (B*W,) only eos may follow
        if scorer is None:
            cand_ids = None  # candidates are the whole vocabulary
            cand = att  # (B*W, V)
        else:
            if k_pre >= v - 1:
                cand_ids = torch.arange(v, device=dev).expand(b * w, v)
            else:
                pre = att.clone()
                pre[:, eos] = -math.inf  # eos is always a candidate, added below
                pre_ids = pre.topk(k_pre, dim=-1).indices
                cand_ids = torch.cat([pre_ids, torch.full_like(pre_ids[:, :1], eos)], dim=1)  # (B*W, K)
            psi = scorer.score(state, cand_ids)  # (B*W, K) float64
            ctc = (psi - state.psi.unsqueeze(1)).float().nan_to_num(nan=-math.inf)
            cand = (1 - ctc_weight) * att.gather(1, cand_ids) + ctc_weight * ctc
        cand = cand + length_bonus
        if bool(at_limit.any()):
            is_eos = (cand_ids == eos) if cand_ids is not None else (torch.arange(v, device=dev) == eos)
            cand = torch.where(at_limit.unsqueeze(1) & ~is_eos, -math.inf, cand)
        kc = cand.shape[1]
        total = (scores.view(-1, 1) + cand).view(b, w * kc)  # (B, W*K)
        top, flat = total.topk(min(2 * w, w * kc), dim=1)  # (B, 2W)
        parent_local = torch.div(flat, kc, rounding_mode="floor")
        parent = parent_local + torch.arange(b, device=dev).unsqueeze(1) * w  # row index, (B, 2W)
        tok = flat % kc if cand_ids is None else cand_ids[parent, flat % kc]  # (B, 2W)
        ended = (tok == eos) & torch.isfinite(top)
        ended[:, w:] = False

        # ended hypotheses move to the finished lists
        n_fin = torch.tensor([len(finished[int(u)]) for u in utts], device=dev)
        for bi, j in torch.nonzero(ended).tolist():
            hyp_tokens = seqs[parent[bi, j]].tolist()
            s = float(top[bi, j])
            if length_norm:
                s /= len(hyp_tokens) + 1
            finished[int(utts[bi])].append(Hypothesis(hyp_tokens, s))
        n_fin = n_fin + ended.sum(1)

        # the first W candidates that are not eos continue
        order = (torch.arange(top.shape[1], device=dev) + (tok == eos) * top.shape[1]).argsort(dim=1)[:, :w]
        scores = top.gather(1, order)  # (B, W)
        sel_parent = parent.gather(1, order).flatten()  # (B*W,)
        tokens = tok.gather(1, order).flatten()
        seqs = torch.cat([seqs[sel_parent], tokens.unsqueeze(1)], dim=1)
        cache = cache.reorder_self(sel_parent)  # cross K/V: one row per utterance, shared by its beams
        if scorer is not None:
            sel_k = (flat % kc).gather(1, order).flatten()
            state = scorer.extend(state, sel_parent, tokens, psi[sel_parent, sel_k])
        step += 1

        # which utterances are done
        best_run = scores.max(1).values  # (B,)
        best_fin = torch.tensor([max((h.score for h in finished[int(u)]), default=-math.inf) for u in utts], device=dev)
        done = (n_fin >= w) | (limits < step) | torch.isneginf(best_run)
        if monotone:
            done |= best_fin >= best_run
        if bool(done.any()):
            keep = torch.nonzero(~done).flatten()  # (B',)
            keep_rows = (keep.unsqueeze(1) * w + torch.arange(w, device=dev)).flatten()
            utts, limits, scores = utts[keep], limits[keep], scores[keep]
            seqs, tokens = seqs[keep_rows], tokens[keep_rows]
            b = keep.numel()
            if b:
                cache = cache.index_select(keep_rows, cross_index=keep)
                if scorer is not None:
                    state = state.index_select(keep_rows)  # its utt keeps pointing into the scorer's batch

    out = []
    for hyps in finished:
        hyps.sort(key=lambda h: h.score, reverse=True)
        out.append(hyps[:nbest] if hyps else [Hypothesis([], -math.inf)])
    return out
