"""A trained recogniser: the network, the configuration it was trained with, and its tokenizer.

``asr.load_model(dir)`` returns one. The network (:class:`asr.model.ASRModel`) stays a plain
``nn.Module`` that knows only its dimensions (``model.cfg``, a ``ModelConfig``); everything
needed to go from audio to text (the feature settings, the default search, the tokenizer)
travels beside it here, as in Whisper's ``load_model`` + ``decode`` split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import Config, DecodeConfig
from .features import compute_features
from .text import Tokenizer

__all__ = ["Recognizer"]


@dataclass
class Recognizer:
    model: torch.nn.Module  # an ASRModel, in eval mode
    config: Config  # the full experiment configuration the model was trained with
    tokenizer: Tokenizer | None  # None when the model directory has no tokenizer.model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> Recognizer:
        self.model.to(device)
        return self

    def features(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """The model's input features of 1-D waveforms at ``config.data.sample_rate``."""
        return compute_features(waveforms, self.config.data)

    def recognize(self, feats: torch.Tensor, feat_lens: torch.Tensor, decode: DecodeConfig | None = None):
        """Best :class:`~asr.decode.Hypothesis` per utterance of a padded batch; the config's search by default."""
        from .decode import recognize

        return recognize(self.model, feats, feat_lens, decode or self.config.decode)

    def text(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            raise ValueError("the model has no tokenizer: load it from a model directory with tokenizer.model")
        return self.tokenizer.decode(tokens)
