"""Language models over the ASR model's subword ids: a causal Transformer (the decoder's blocks
without cross-attention) and an LSTM; trained by ``asr.training.train``'s loop (:class:`~asr.lm.task.LMTask`),
fused into the search by shallow fusion (``asr.decode``), stored as an LM directory."""

from asr.lm.cache import LMCache
from asr.lm.config import LMConfig, LMDataConfig, LMExperimentConfig, load_lm_config
from asr.lm.directory import LanguageModel, check_lm_fits, is_lm_dir, load_lm, save_lm_dir
from asr.lm.lstm_lm import LSTMLM
from asr.lm.model import LMLoss, build_lm
from asr.lm.transformer_lm import TransformerLM

__all__ = [
    "LMCache",
    "LMConfig",
    "LMDataConfig",
    "LMExperimentConfig",
    "load_lm_config",
    "LanguageModel",
    "check_lm_fits",
    "is_lm_dir",
    "load_lm",
    "save_lm_dir",
    "LSTMLM",
    "TransformerLM",
    "LMLoss",
    "build_lm",
]
