"""The model: CMVN, frontends, attention, Transformer encoder/decoder with KV cache, losses."""

from asr.model.asr_model import BLANK_ID, IGNORE_ID, UNK_ID, ASRModel
from asr.model.attention import MultiHeadAttention, SinusoidalPositions, causal_keep_mask, lengths_to_keep_mask
from asr.model.cmvn import GlobalCMVN
from asr.model.frontend import Conv2dFrontend, LinearStackFrontend
from asr.model.transformer import Decoder, DecoderCache, Encoder

__all__ = [
    "ASRModel",
    "BLANK_ID",
    "UNK_ID",
    "IGNORE_ID",
    "MultiHeadAttention",
    "SinusoidalPositions",
    "causal_keep_mask",
    "lengths_to_keep_mask",
    "GlobalCMVN",
    "Conv2dFrontend",
    "LinearStackFrontend",
    "Decoder",
    "DecoderCache",
    "Encoder",
]
