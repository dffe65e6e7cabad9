"""A trained recogniser: the network, the configuration it was trained with, and its tokenizer.

``asr.load_model(dir)`` returns one. The network (:class:`asr.model.ASRModel`) stays a plain
``nn.Module`` that knows only its dimensions (``model.cfg``, a ``ModelConfig``); everything
needed to go from audio to text (the feature settings, the default search, the tokenizer, an
optional language model for shallow fusion) travels beside it here, as in Whisper's
``load_model`` + ``decode`` split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from asr.checkpoint import CONFIG_FILE, MODEL_FILE, load_weights
from asr.config import Config, DecodeConfig, load_config
from asr.features import compute_features
from asr.text import TOKENIZER_FILE, Tokenizer

if TYPE_CHECKING:
    from asr.lm import LanguageModel
    from asr.whisper_text import WhisperTokenizer

__all__ = ["Recognizer", "load_model"]


@dataclass
class Recognizer:
    model: torch.nn.Module  # an ASRModel, in eval mode
    config: Config  # the full experiment configuration the model was trained with
    tokenizer: Tokenizer | WhisperTokenizer | None  # None when the model directory has none
    lm: LanguageModel | None = None  # fused with decode.lm_weight; see :meth:`use_lm`

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> Recognizer:
        self.model.to(device)
        if self.lm is not None:
            self.lm.to(device)
        return self

    def use_lm(self, lm: LanguageModel | str | os.PathLike | None, base: str | os.PathLike | None = None) -> Recognizer:
        """Fuse ``lm`` (a loaded LM or an LM directory; a relative path is taken from ``base`` when it
        exists there) from now on; None: no LM. An LM over another vocabulary is an error naming both."""
        from asr.lm import check_lm_fits, load_lm

        if lm is not None and not hasattr(lm, "model"):
            path = Path(lm)
            if base is not None and not path.is_absolute() and (Path(base) / path).is_dir():
                path = Path(base) / path
            lm = load_lm(path, self.device)
        if lm is not None:
            check_lm_fits(lm, self.model.vocab_size, self.tokenizer)
        self.lm = lm
        return self

    def features(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """The model's input features of 1-D waveforms at ``config.data.sample_rate``."""
        return compute_features(waveforms, self.config.data)

    def recognize(self, feats: torch.Tensor, feat_lens: torch.Tensor, decode: DecodeConfig | None = None):
        """Best :class:`~asr.decode.Hypothesis` per utterance of a padded batch; the config's search by default."""
        from asr.decode import recognize

        cfg = decode or self.config.decode
        return recognize(self.model, feats, feat_lens, cfg, self._fused_lm(cfg), self.tokenizer)

    def recognize_views(self, views, decode: DecodeConfig | None = None):
        """``{id: Hypothesis}`` over several views of the same utterances (``decode.speeds``):
        ``views`` is a list of (ids, padded fbank batch, lengths), one per speed."""
        from asr.decode.speeds import recognize_views

        cfg = decode or self.config.decode
        return recognize_views(self.model, views, cfg, self._fused_lm(cfg))

    def _fused_lm(self, cfg: DecodeConfig) -> torch.nn.Module | None:
        """The LM network the search fuses with ``cfg`` (int8 with ``quantize_lm``); None without an
        LM or at ``lm_weight`` 0."""
        return self.lm.network(cfg.quantize_lm) if self.lm is not None and cfg.lm_weight else None

    def text(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            raise ValueError("the model has no tokenizer: load it from a model directory with tokenizer.model")
        return self.tokenizer.decode(tokens)


def load_model(model_dir: str | os.PathLike, device: str | torch.device = "cpu") -> Recognizer:
    """The :class:`Recognizer` of a model directory: the model (weights loaded, eval mode, on
    ``device``), its full :class:`Config` and its tokenizer (None without tokenizer.model)."""
    from asr.model import ASRModel

    d = Path(model_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such model directory")
    for name in (CONFIG_FILE, MODEL_FILE):
        if not (d / name).is_file():
            raise FileNotFoundError(f"{d}: not a model directory ({name} is missing)")
    cfg = load_config(d / CONFIG_FILE)
    model = ASRModel(cfg.model)
    load_weights(model, d / MODEL_FILE)
    tokenizer = _load_tokenizer(d, cfg, model)
    rec = Recognizer(model.to(device).eval(), cfg, tokenizer)
    return rec.use_lm(cfg.decode.lm, base=d) if cfg.decode.lm else rec  # the directory's default LM


def _load_tokenizer(d: Path, cfg: Config, model) -> Tokenizer | WhisperTokenizer | None:
    """The directory's tokenizer: SentencePiece's tokenizer.model, or a Whisper model's tokenizer.json."""
    if cfg.decode.rules == "whisper" or cfg.data.features == "whisper":
        from asr.whisper_text import WHISPER_TOKENIZER_FILE, WhisperTokenizer

        return WhisperTokenizer.for_model(d / WHISPER_TOKENIZER_FILE, model.vocab_size, f"the model {d}")
    return Tokenizer.load(d / TOKENIZER_FILE) if (d / TOKENIZER_FILE).is_file() else None
