"""Beam search over a batch of utterances: all B x beam hypotheses advance in one decoder call.

Joint CTC/attention scoring (Watanabe et al. 2017): a candidate's score is
``(1 - ctc_weight) * log p_att + ctc_weight * (log psi(h + c) - log psi(h))`` plus a length bonus
per token. With CTC, only the ``pre_beam`` best tokens of the decoder (and eos) get CTC prefix
scores, as in ESPnet; ``pre_beam=0`` scores the whole vocabulary.

Shallow fusion with a language model (``asr.lm``) adds ``lm_weight * log p_lm`` per token (eos
included). The LM steps once per search step over all B x W rows, like the decoder, and its cache
is reordered with the beams exactly as the decoder's self-attention cache is. With an LM, the
pre-beam ranks tokens by ``(1 - ctc_weight) log p_att + lm_weight log p_lm`` (ESPnet's "full"
scores). ``lm_weight=0`` does not run the LM at all: the search is the one without an LM.

At each step the 2 x beam best candidates of every utterance are ranked (as in fairseq): an eos
among the first ``beam`` ends a hypothesis, the first ``beam`` non-eos ones continue. An
utterance stops when it has ``beam`` ended hypotheses, when no running hypothesis can beat the
best ended one (scores only fall when there is no length bonus/normalisation), or at its maximum
length (encoder frames x ``max_len_ratio``), where the running hypotheses are ended. Stopped
utterances leave the batch; each utterance's decisions depend on its own rows only, so a result
does not depend on the batch it was decoded in. The first step runs one row per utterance (its W
hypotheses are still one: sos), whose scores stand for all W; the beams branch from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from asr.decode.ctc_prefix_score import CTCPrefixScorer, CTCPrefixState
from asr.decode.greedy import max_lengths
from asr.lm.cache import LMCache
from asr.model.asr_model import BLANK_ID
from asr.model.kv_cache import KVCache
from asr.model.transformer import DecoderCache

__all__ = ["Hypothesis", "beam_search"]


@dataclass
class Hypothesis:
    """A finished hypothesis: token ids (no sos/eos) and its score (higher is better).

    ``score`` is the sum of the step scores (length bonus included); with length normalisation
    hypotheses are ranked by ``score / (len(tokens) + 1)``, which is then stored in ``score``.
    """

    tokens: list[int]
    score: float


@dataclass
class _Beams:
    """The utterances still searching and their W hypotheses each; rows are utterance-major
    (row ``i * W + j`` is hypothesis j of live utterance i)."""

    utts: torch.Tensor  # (B,) position of each live utterance in the input batch
    limits: torch.Tensor  # (B,) longest output allowed
    scores: torch.Tensor  # (B, W) running scores; -inf marks an empty slot
    seqs: torch.Tensor  # (B*W, step) tokens so far
    tokens: torch.Tensor  # (B*W,) newest token of each hypothesis (sos at the start)
    cache: DecoderCache  # self-attention K/V per row; cross-attention K/V per utterance
    ctc: CTCPrefixState | None  # CTC prefix state per row
    lm_cache: LMCache | KVCache | None = None  # the fused LM's state per row

    def advance(self, parent, tokens, scores, ctc, keep=None, state_parent=None) -> None:
        """Rows ``parent`` (B*W,) extended by ``tokens`` (B*W,), with their new scores (B, W); with
        ``keep`` (B',), only those live utterances stay, and ``parent``, ``tokens``, ``scores`` and
        ``ctc`` are theirs alone (B'*W rows): each cache moves once, and only the rows that go on.
        ``state_parent``: the parents' rows in the caches, where those differ from ``parent`` (before
        the first step they hold one row per utterance)."""
        self.scores, self.tokens = scores, tokens
        self.seqs = torch.cat([self.seqs[parent], tokens.unsqueeze(1)], dim=1)
        state_parent = parent if state_parent is None else state_parent
        if keep is None:
            self.cache = self.cache.reorder_self(state_parent)
        else:
            self.utts, self.limits = self.utts[keep], self.limits[keep]
            self.cache = self.cache.index_select(state_parent, cross_index=keep)
        self.ctc = ctc
        if self.lm_cache is not None:
            self.lm_cache = self.lm_cache.index_select(state_parent)


def _joint_scores(att, scorer, state, ctc_weight: float, k_pre: int, eos: int, lm=None, lm_weight: float = 0.0):
    """Step scores of the candidates of each row: (scores (N, K), ids (N, K) or None for the whole
    vocabulary, CTC log psi (N, K) or None). With CTC the candidates are the ``k_pre`` best tokens
    of the decoder (with an LM: of the fused decoder + LM score), plus eos;
    ``(1 - w) log p_att + w (log psi(h + c) - log psi(h)) [+ lm_weight log p_lm]``."""
    if scorer is None:
        return (att, None, None) if lm is None else (att + lm_weight * lm, None, None)
    n, v = att.shape
    if k_pre >= v - 1:
        ids = torch.arange(v, device=att.device).expand(n, v)
    else:
        pre = att.clone() if lm is None else (1 - ctc_weight) * att + lm_weight * lm
        pre[:, eos] = -math.inf  # eos is always a candidate, added below
        pre_ids = pre.topk(k_pre, dim=-1).indices
        ids = torch.cat([pre_ids, torch.full_like(pre_ids[:, :1], eos)], dim=1)  # (N, K)
    psi = scorer.score(state, ids)  # (N, K) float64
    ctc = (psi - state.psi.unsqueeze(1)).float().nan_to_num(nan=-math.inf)
    joint = (1 - ctc_weight) * att.gather(1, ids) + ctc_weight * ctc
    return (joint, ids, psi) if lm is None else (joint + lm_weight * lm.gather(1, ids), ids, psi)


def _stable_slots(parent: torch.Tensor) -> torch.Tensor:
    """Where each utterance's W survivors go: (B, W), slot s takes survivor ``perm[b, s]``, given
    their parents' slots ``parent`` (B, W). A parent's first child takes the parent's own slot and
    the other children the slots of hypotheses that left no child, so most rows of the KV caches
    stay where they are and only new branches are copied (``KVCache.index_select``). The order of
    an utterance's hypotheses means nothing else to the search."""
    w = parent.shape[1]
    perms = []
    for parents in parent.tolist():
        slot = [-1] * w
        for j, p in enumerate(parents):
            if p not in slot:
                slot[j] = p
        free = iter(sorted(set(range(w)) - set(slot)))
        perm = [0] * w
        for j, s in enumerate(slot):
            perm[s if s >= 0 else next(free)] = j
        perms.append(perm)
    return torch.tensor(perms, device=parent.device)


def _end(finished: list[list[Hypothesis]], beams: _Beams, top, parent, tok, eos: int, length_norm: bool):
    """Move the hypotheses that end (an eos among an utterance's W best candidates) to ``finished``;
    returns how many each live utterance now has, (B,)."""
    w = beams.scores.shape[1]
    ended = (tok == eos) & torch.isfinite(top)
    ended[:, w:] = False
    for bi, j in torch.nonzero(ended).tolist():
        hyp_tokens = beams.seqs[parent[bi, j]].tolist()
        s = float(top[bi, j])
        finished[int(beams.utts[bi])].append(Hypothesis(hyp_tokens, s / (len(hyp_tokens) + 1) if length_norm else s))
    return torch.tensor([len(finished[int(u)]) for u in beams.utts], device=top.device)


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
    lm=None,
    lm_weight: float = 0.0,
) -> list[list[Hypothesis]]:
    """Batched joint CTC/attention beam search; memory (B, S, D), mem_lens (B,).

    Returns the ``nbest`` best hypotheses of each utterance, best first. ``ctc_log_probs``
    (B, S, V) default to ``model.ctc_log_probs(memory)`` when ``ctc_weight > 0``. ``pre_beam``:
    tokens per hypothesis that get CTC scores (default 1.5 x beam, ESPnet's; 0: all).
    ``min_len`` suppresses eos before that many tokens; ``max_len`` overrides the length limit.
    ``lm``: a language model network (``asr.lm``: ``init_cache``, ``step``) over the same ids, fused
    with ``lm_weight``; check the vocabularies first (``asr.lm.check_lm_fits``).
    """
    decoder = model.decoder
    if decoder is None:
        raise ValueError("beam_search: the model has no attention decoder (decoder_layers=0); use a CTC mode")
    if not 0.0 <= ctc_weight < 1.0:
        raise ValueError(f"beam_search: ctc_weight must be in [0, 1), got {ctc_weight} (1.0: use mode ctc_beam)")
    if lm_weight == 0:
        lm = None
    elif lm is not None and lm.vocab_size != model.vocab_size:
        raise ValueError(f"beam_search: the LM has {lm.vocab_size} ids, the ASR model {model.vocab_size}")
    b_total, dev = memory.shape[0], memory.device
    w, v, eos = beam_size, model.vocab_size, model.eos_id
    finished: list[list[Hypothesis]] = [[] for _ in range(b_total)]
    utts = torch.nonzero(mem_lens > 0).flatten()  # input position of each live utterance, (B,)
    if utts.numel() == 0:
        return [[Hypothesis([], 0.0)] for _ in range(b_total)]
    b = utts.numel()
    scorer = k_pre = None
    if ctc_weight > 0:
        lp = model.ctc_log_probs(memory) if ctc_log_probs is None else ctc_log_probs
        scorer = CTCPrefixScorer(lp[utts], mem_lens[utts], blank=BLANK_ID, eos=eos)
        k_pre = v if pre_beam == 0 else min(v - 1, pre_beam or max(1, int(1.5 * w)))  # tokens besides eos
    scores = torch.full((b, w), -math.inf, device=dev)  # one live hypothesis per utterance at the start
    scores[:, 0] = 0.0
    # the first step's W rows of an utterance are alike (sos, nothing seen): its decoder, LM and
    # CTC states hold one row per utterance, whose scores stand for all W (fan), until it branches
    fan = w
    beams = _Beams(
        utts=utts,
        limits=max_lengths(mem_lens, max_len, max_len_ratio)[utts],
        scores=scores,
        seqs=torch.zeros(b * w, 0, dtype=torch.long, device=dev),
        tokens=torch.full((b,), model.sos_id, dtype=torch.long, device=dev),
        cache=decoder.init_cache(memory[utts], mem_lens[utts]),  # cross K/V once per utterance
        ctc=scorer.initial_state(torch.arange(b, device=dev)) if scorer else None,
        lm_cache=lm.init_cache(b, dev) if lm is not None else None,
    )
    monotone = length_bonus <= 0 and not length_norm  # scores only fall: a finished best cannot be beaten

    step = 0
    while b > 0:
        logits, beams.cache = decoder.step(beams.tokens, beams.cache)  # (B*W / fan, V)
        att = torch.log_softmax(logits.float(), dim=-1)
        att[:, BLANK_ID] = -math.inf  # blank is never a decoder target
        if step < min_len:
            att[:, eos] = -math.inf
        lm_lp = None
        if lm is not None:
            lm_lp, beams.lm_cache = lm.step(beams.tokens, beams.lm_cache)  # (B*W, V) log p_lm
        cand, cand_ids, psi = _joint_scores(att, scorer, beams.ctc, ctc_weight, k_pre, eos, lm_lp, lm_weight)
        if fan > 1:  # each row's scores for the W rows it stands for: (B*W, K)
            cand, cand_ids, psi = (None if t is None else t.repeat_interleave(fan, 0) for t in (cand, cand_ids, psi))
        cand = cand + length_bonus
        at_limit = (beams.limits <= step).repeat_interleave(w)  # (B*W,) only eos may follow
        if bool(at_limit.any()):
            is_eos = (cand_ids == eos) if cand_ids is not None else (torch.arange(v, device=dev) == eos)
            cand = torch.where(at_limit.unsqueeze(1) & ~is_eos, -math.inf, cand)

        # the 2W best candidates of each utterance (as in fairseq): eos among the first W ends a
        # hypothesis, the first W that are not eos continue
        kc = cand.shape[1]
        total = (beams.scores.view(-1, 1) + cand).view(b, w * kc)  # (B, W*K)
        top, flat = total.topk(min(2 * w, w * kc), dim=1)  # (B, 2W)
        parent = torch.div(flat, kc, rounding_mode="floor") + torch.arange(b, device=dev).unsqueeze(1) * w
        tok = flat % kc if cand_ids is None else cand_ids[parent, flat % kc]  # (B, 2W)
        n_fin = _end(finished, beams, top, parent, tok, eos, length_norm)
        order = (torch.arange(top.shape[1], device=dev) + (tok == eos) * top.shape[1]).argsort(dim=1)[:, :w]
        order = order.gather(1, _stable_slots(torch.div(flat.gather(1, order), kc, rounding_mode="floor")))
        sel_parent, tokens, new_scores = parent.gather(1, order), tok.gather(1, order), top.gather(1, order)
        step += 1

        # an utterance is done with W ended hypotheses, past its limit, or when nothing can improve;
        # decided before anything moves, so that the states of the utterances that stop stay behind
        best_run = new_scores.max(1).values  # (B,)
        done = (n_fin >= w) | (beams.limits < step) | torch.isneginf(best_run)
        if monotone:
            best_fin = [max((h.score for h in finished[int(u)]), default=-math.inf) for u in beams.utts]
            done |= torch.tensor(best_fin, device=dev) >= best_run
        keep = None
        if bool(done.any()):
            keep = torch.nonzero(~done).flatten()
            if keep.numel() == 0:
                break
            sel_parent, tokens, new_scores, order, flat = (
                x[keep] for x in (sel_parent, tokens, new_scores, order, flat)
            )
        sel_parent, tokens = sel_parent.flatten(), tokens.flatten()  # (B'*W,)
        state_parent = sel_parent if fan == 1 else torch.div(sel_parent, fan, rounding_mode="floor")
        ctc = None
        if scorer is not None:
            chosen = psi[sel_parent, (flat % kc).gather(1, order).flatten()]
            ctc = scorer.extend(beams.ctc, state_parent, tokens, chosen)
        beams.advance(sel_parent, tokens, new_scores, ctc, keep, state_parent)
        b, fan = beams.utts.numel(), 1

    best_first = [sorted(hyps, key=lambda h: h.score, reverse=True) for hyps in finished]
    return [hyps[:nbest] or [Hypothesis([], -math.inf)] for hyps in best_first]
