"""Search: greedy and batched beam search (attention + CTC), CTC prefix scoring, rescoring."""

from asr.decode.beam_search import Hypothesis, beam_search
from asr.decode.ctc_beam import attention_rescoring, ctc_prefix_beam_search
from asr.decode.ctc_prefix_score import CTCPrefixScorer, CTCPrefixState
from asr.decode.greedy import ctc_greedy_search, greedy_search, max_lengths
from asr.decode.search import recognize

__all__ = [
    "Hypothesis",
    "greedy_search",
    "beam_search",
    "ctc_greedy_search",
    "ctc_prefix_beam_search",
    "attention_rescoring",
    "CTCPrefixScorer",
    "CTCPrefixState",
    "max_lengths",
    "recognize",
]
