"""Search: greedy and batched beam search (attention + CTC), CTC prefix scoring, rescoring."""

from .greedy import ctc_greedy_search, greedy_search, max_lengths

__all__ = ["greedy_search", "ctc_greedy_search", "max_lengths"]
