"""Vectorised CTC prefix scores for label-synchronous search (Watanabe et al. 2017).

The formulation of ESPnet's ``CTCPrefixScoreTH``: every hypothesis h (a prefix) carries, for each
frame t, the log-probabilities of all alignments of frames 0..t that emit h and end in a
non-blank (``r_n``) or in a blank (``r_b``). For a candidate token c,

    phi_t  = r_n_t(h) + r_b_t(h)     (only r_b_t(h) when c repeats h's last token)
    psi(hc) = sum_t phi_{t-1} * p_t(c)          (phi_{-1} = 1 for the empty prefix)

is the probability that the CTC output starts with hc, and log psi(hc) - log psi(h) is the
candidate's CTC score; eos scores log P(h) - log psi(h) with P(h) = r_n + r_b at the last frame.

Two changes of arrangement, same numbers: (1) candidates are scored with psi alone (one masked
logsumexp over frames for all hypotheses x candidates); the recursions for r_n/r_b are run only
for the candidates that survive the beam. (2) Those recursions are linear in probability space,

    r_n_t = (r_n_{t-1} + phi_{t-1}) p_t(c),     r_b_t = (r_n_{t-1} + r_b_{t-1}) p_t(blank),

so each is one cumulative sum and one ``logcumsumexp`` over frames instead of a Python loop over
T frames (float64 keeps the cumulative sums exact enough; tested against a brute-force sum over
all alignments). Frames past an utterance's length never reach its scores, so batching and
padding do not change them. What scoring reads of a state (phi's two cases shifted by a frame, in
the log-probs' dtype, and log P(h)) is made once, when the state is; a state is scored once per
step, so a step runs few ATen operations (a search one utterance at a time waits on their count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["CTCPrefixScorer", "CTCPrefixState"]

NEG_INF = -math.inf
LOG_FLOOR = -1e4  # log-probabilities are clamped here, so cumulative sums stay finite
EXP_FLOOR = -80.0  # e^-80 = 1.8e-35: still a normal float32 (those end at e^-87.3)


def _logsumexp(s: torch.Tensor) -> torch.Tensor:
    """``s.logsumexp(-1)`` with the same value, without the slow part: PyTorch's CPU float32 ``exp``
    is about 10x slower on arguments below -87.3 (results that underflow to 0 or a denormal), and
    nearly all of a CTC prefix sum's terms are far below its largest. Terms more than 80 nats
    under the row's largest are raised to e^-80 before the sum: the largest term contributes
    exactly 1, so at most T x e^-80 (< 1e-31) is added to a sum of at least 1, far below half a
    float32 ulp of it; the sum rounds to the same number. Rows that are all -inf stay -inf."""
    m = s.amax(-1, keepdim=True)
    empty = torch.isneginf(m)
    total = (s - m.masked_fill(empty, 0.0)).clamp_min_(EXP_FLOOR).exp_().sum(-1, keepdim=True)
    return total.log_().add_(m).masked_fill_(empty, NEG_INF).squeeze(-1)


def _shift(a: torch.Tensor, fill: float) -> torch.Tensor:
    """``a`` (T, ...) one frame later: row t holds row t - 1 of ``a``, row 0 holds ``fill``."""
    return torch.cat([torch.full_like(a[:1], fill), a[:-1]])


def _start(length: int) -> float:
    """log phi_{-1}: the empty prefix before frame 0 (0 for it, -inf for any longer one)."""
    return 0.0 if length == 0 else NEG_INF


@dataclass
class CTCPrefixState:
    """CTC state of N hypotheses that all have ``length`` tokens (the search is label-synchronous).

    ``r``: (T, 3, N) float64 log r_n, log r_b and log (r_n + r_b) per frame; ``psi``: (N,) log
    prefix probability; ``utt``: (N,) which utterance each hypothesis belongs to; ``last``: (N,)
    last token (-1: none). What :meth:`CTCPrefixScorer.score` reads, made once with the state:
    ``before``: (2, N, T) in the log-probs' dtype, whose column t holds log r_b and log (r_n + r_b)
    of frame t - 1 (-inf past the utterance's end); ``full``: (N,) log P(h), the whole output.
    """

    r: torch.Tensor
    psi: torch.Tensor
    utt: torch.Tensor
    last: torch.Tensor
    length: int
    before: torch.Tensor
    full: torch.Tensor


class CTCPrefixScorer:
    """Prefix scores of a batch of utterances: CTC log-probs (B, T, V) and lengths (B,)."""

    def __init__(self, log_probs: torch.Tensor, lens: torch.Tensor, blank: int, eos: int):
        b, t, v = log_probs.shape
        self.blank, self.eos, self.vocab = blank, eos, v
        self.lens = lens.to(log_probs.device)
        # (B * V, T): the frames of one (utterance, token) are contiguous, so gathering candidates is cheap
        self.x = log_probs.transpose(1, 2).reshape(b * v, t).contiguous()
        xb = log_probs[:, :, blank].t().double().clamp_min(LOG_FLOOR)  # (T, B)
        self.blank_cum = xb.cumsum(0)  # (T, B): log p(all blank up to t)
        self.blank_cum_before = _shift(self.blank_cum, 0.0)  # (T, B): up to t - 1
        self.pad = torch.arange(t, device=log_probs.device) >= self.lens.unsqueeze(1)  # (B, T) past the end
        self.end = (self.lens - 1).clamp_min(0)  # (B,) each utterance's last frame

    def _state(self, r: torch.Tensor, psi, utt, last, length: int) -> CTCPrefixState:
        """The state of hypotheses whose recursions ``r`` (T, 3, N) are done, with what ``score`` reads."""
        first = _start(length)
        shifted = _shift(r[:, 1:], first)  # (T, 2, N): row t holds frame t - 1
        before = shifted.permute(1, 2, 0).to(self.x.dtype, memory_format=torch.contiguous_format)  # (2, N, T)
        before.masked_fill_(self.pad[utt], NEG_INF)
        full = r[self.end[utt], 2, torch.arange(r.shape[2], device=r.device)]  # log P(h)
        full = torch.where(self.lens[utt] > 0, full, first)
        return CTCPrefixState(r, psi, utt, last, length, before, full)

    def initial_state(self, utt: torch.Tensor) -> CTCPrefixState:
        """The empty prefix for hypotheses of utterances ``utt`` (N,)."""
        rb = self.blank_cum[:, utt]  # (T, N)
        r = torch.stack([torch.full_like(rb, NEG_INF), rb, rb], dim=1)  # (T, 3, N)
        zeros = torch.zeros(utt.shape[0], dtype=torch.float64, device=rb.device)
        return self._state(r, zeros, utt, torch.full_like(utt, -1), 0)

    def score(self, state: CTCPrefixState, tokens: torch.Tensor) -> torch.Tensor:
        """log psi(h + c) for candidates ``tokens`` (N, K) of each hypothesis: (N, K) float64.

        eos gets log P(h) (the prefix is the whole output); blank gets -inf. The sum over frames
        runs in the log-probs' dtype (float32 from a model) over (N, K, T) rows, each candidate's
        frames contiguous; in float32 it is within 1e-5 of float64, and only this one step's sum
        is rounded: the recursions that carry the state from step to step stay float64.
        """
        n, k = tokens.shape
        flat = (state.utt.unsqueeze(1) * self.vocab + tokens).flatten()  # (N * K,)
        x = self.x.index_select(0, flat).view(n, k, -1)  # (N, K, T) log p_t(c)
        repeat = (tokens == state.last.unsqueeze(1)).unsqueeze(2)  # (N, K, 1): c repeats h's last token
        phi = torch.where(repeat, state.before[0].unsqueeze(1), state.before[1].unsqueeze(1))  # (N, K, T)
        psi = _logsumexp(phi.add_(x)).double()  # (N, K)
        psi = torch.where(tokens == self.eos, state.full.unsqueeze(1), psi)
        return psi.masked_fill_(tokens == self.blank, NEG_INF)

    def score_all(self, state: CTCPrefixState) -> torch.Tensor:
        """log psi for every token of the vocabulary: (N, V). Memory T x N x V: small vocabularies."""
        n = state.psi.shape[0]
        tokens = torch.arange(self.vocab, device=state.psi.device).expand(n, -1)
        return self.score(state, tokens)

    def extend(
        self, state: CTCPrefixState, parent: torch.Tensor, tokens: torch.Tensor, psi: torch.Tensor
    ) -> CTCPrefixState:
        """The states of hypotheses ``parent`` (M,) extended by ``tokens`` (M,), whose log psi
        (M,) came from :meth:`score`; tokens must not be blank or eos."""
        utt = state.utt[parent]
        r = state.r[:, 1:, parent]  # (T, 2, M): the parents' log r_b and log (r_n + r_b)
        flat = utt * self.vocab + tokens
        x = self.x.index_select(0, flat).t().double().clamp_min(LOG_FLOOR)  # (T, M) log p_t(c)
        # phi_{t-1} (row t): r_b alone when c repeats the parent's last token
        phi = torch.where(tokens == state.last[parent], r[:, 0], r[:, 1])
        phi = _shift(phi, _start(state.length))
        # r_n_t = sum_{s<=t} phi_{s-1} prod_{u=s..t} p_u(c)
        cum = x.cumsum(0)  # (T, M)
        rn = cum + torch.logcumsumexp(phi - _shift(cum, 0.0), 0)
        # r_b_t = sum_{1<=s<=t} r_n_{s-1} prod_{u=s..t} p_u(blank)
        rb = self.blank_cum[:, utt] + torch.logcumsumexp(_shift(rn, NEG_INF) - self.blank_cum_before[:, utt], 0)
        r = torch.stack([rn, rb, torch.logaddexp(rn, rb)], dim=1)
        return self._state(r, psi.double(), utt, tokens, state.length + 1)
