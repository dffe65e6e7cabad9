"""Search rules: the choices that differ between toolkits' beam searches, as data read by the one search.

The joint CTC/attention beam search (``asr.decode.beam_search``) is one batched loop; what a
toolkit decides differently is which of the best candidates continue and when it stops. A
:class:`Rules` names those choices, and ``decode.rules`` picks a set by name. Both sets score the
same candidates, ESPnet's: the ``int(1.5 x beam)`` best tokens of the decoder (with an LM, of the
decoder and LM), blank and eos among those ranked, get CTC prefix scores; blank's is -inf (it is
never an output) and eos is always scored.

``asr`` (the default for models trained here)
    Of the ``2 x beam`` best candidates of an utterance, an eos among the first ``beam`` ends a
    hypothesis and the first ``beam`` that are not eos continue (fairseq's rule), so the beam stays
    full. The search stops once ``beam`` hypotheses have ended, when no running hypothesis can
    still beat the best ended one (scores only fall without a length bonus), or at the length limit
    (``ceil(max_len_ratio x frames)``, where only eos may follow, with its score). Without CTC
    the decoder's blank is never a candidate.

``espnet`` (set by ``asr import espnet``: ESPnet's ``BatchBeamSearch`` as ``Speech2Text`` runs it)
    Of the ``beam`` best candidates, those ending in eos end and the others continue: the beam
    shrinks as hypotheses end. The search runs to the maximum length (``max_len_ratio`` 0: the
    encoder's frames, with ESPnet's end detection; > 0: ``int(ratio x frames)`` without it),
    where the survivors end without an eos score, or until nothing runs. Hypotheses that end
    before ``min_len`` tokens are dropped instead of eos being suppressed; without CTC the decoder
    may emit blank, as ESPnet's does. Where scores only fall and one hypothesis is asked for, the
    search also stops once nothing running can beat the best ended hypothesis: that cannot change
    the best one.

``whisper`` (set by ``asr import whisper``: openai-whisper's ``decode`` at temperature 0)
    The search starts from a prompt (start of transcript, language, task, no-timestamps) and some
    tokens are never emitted (Whisper's suppression; a blank or end of text never first; with
    timestamps, Whisper's timestamp rules), all applied to the logits before the softmax. Of the
    best candidates, an eos ranked before the ``beam``-th continuing one ends a hypothesis, until
    ``round(beam x patience)`` have ended, and the search stops then; at the length limit (224
    tokens, half the decoder's positions) the survivors fill the ended list up to ``beam``,
    unscored. The best is the highest mean log-probability per token (end of text not counted).
    Beam 1 is Whisper's greedy decoding.

``docs/search.md`` measures both on the same models: how often each finds the better hypothesis
and what each costs.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Rules", "RULES", "get_rules", "end_detected"]


@dataclass(frozen=True)
class Rules:
    name: str
    keep_full_beam: bool  # the beam best non-eos candidates continue (else: of the beam best, those not ended)
    stop_when_beam_ended: bool  # stop once `beam` hypotheses have ended
    decoder_may_emit_blank: bool  # without CTC, blank is a candidate like any token (ESPnet's decoder scores it)
    end_detect: bool  # ESPnet's end detection, when max_len_ratio is 0
    eos_scored_at_limit: bool  # at the limit eos is scored (else the survivors end as they are)
    limit_rounds_up: bool  # the limit is ceil(max_len_ratio x frames) (else ESPnet's int(), at least 1)
    min_len_suppresses_eos: bool  # eos is masked before min_len (else: hypotheses ending there are dropped)
    bound_stop_nbest_only: bool  # the "nothing can beat the best ended" stop only when nbest == 1
    end_before_beam_full: bool = False  # eos ends a hypothesis wherever it ranks before the beam-th continuing one
    # (else: only among the first beam)
    ended_capped: bool = False  # no more than round(beam x patience) hypotheses end (the rest are dropped), and
    # at the limit the survivors only fill the ended list up to beam
    rank_by_mean: bool = False  # the best ended hypothesis has the highest score per token (eos not counted)
    whisper_prompt: bool = False  # a prompt, suppressed tokens and (optionally) timestamp rules: Whisper's


RULES = {
    "asr": Rules("asr", keep_full_beam=True, stop_when_beam_ended=True, decoder_may_emit_blank=False,
                 end_detect=False, eos_scored_at_limit=True, limit_rounds_up=True, min_len_suppresses_eos=True,
                 bound_stop_nbest_only=False),
    "espnet": Rules("espnet", keep_full_beam=False, stop_when_beam_ended=False,
                    decoder_may_emit_blank=True, end_detect=True, eos_scored_at_limit=False, limit_rounds_up=False,
                    min_len_suppresses_eos=False, bound_stop_nbest_only=True),
    "whisper": Rules("whisper", keep_full_beam=True, stop_when_beam_ended=True, decoder_may_emit_blank=True,
                     end_detect=False, eos_scored_at_limit=False, limit_rounds_up=True, min_len_suppresses_eos=True,
                     bound_stop_nbest_only=True, end_before_beam_full=True, ended_capped=True, rank_by_mean=True,
                     whisper_prompt=True),
}  # fmt: skip


def get_rules(name: str) -> Rules:
    if name not in RULES:
        raise ValueError(f"decode.rules: expected one of {', '.join(map(repr, RULES))}, got {name!r}")
    return RULES[name]


END_DETECT_SPAN = 3  # ESPnet's end_detect: M, the last lengths looked at
END_DETECT_MARGIN = -10.0  # its D_end = log(exp(-10)): how far below the best they must all be


def end_detected(ended: list[tuple[int, float]], i: int) -> bool:
    """ESPnet's end detection (Watanabe et al. 2017, eq. 50) after search step ``i`` (0-based):
    ``ended`` holds (length with sos and eos, score) of every ended hypothesis. True when, for
    each of the lengths i, i - 1 and i - 2, hypotheses of that length have ended and the best of
    them is more than 10 below the best ended hypothesis overall."""
    if not ended:
        return False
    best = max(s for _, s in ended)
    count = 0
    for m in range(END_DETECT_SPAN):
        same = [s for n, s in ended if n == i - m]
        if same and max(same) - best < END_DETECT_MARGIN:
            count += 1
    return count == END_DETECT_SPAN

