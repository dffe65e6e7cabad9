"""Configuration of a language-model experiment: ``lm`` (the network), ``data`` (text), ``train``.

The ``train`` section is the ASR's :class:`asr.config.TrainConfig` (the same loop trains both), so
an LM run resumes, averages and schedules exactly as an ASR run does. Loaded and checked with
``asr.config``'s machinery: an unknown key or a wrong type is a :class:`ConfigError` naming it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from asr.config import ConfigError, TrainConfig, _check, apply_overrides, build_config, read_config_file, save_config

__all__ = ["LMConfig", "LMDataConfig", "LMExperimentConfig", "load_lm_config", "save_lm_config", "LM_TYPES"]

LM_TYPES = ("transformer", "lstm")


@dataclass
class LMConfig:
    """The network: a causal Transformer (the ASR decoder's blocks without cross-attention) or an LSTM."""

    type: str = "transformer"  # "transformer" or "lstm"
    vocab_size: int = 0  # 0: taken from the tokenizer at training start
    d_model: int = 512  # Transformer width, or the LSTM's embedding and hidden size
    heads: int = 8  # transformer only
    ffn_dim: int = 2048  # transformer only
    layers: int = 16
    dropout: float = 0.1
    norm: str = "pre"  # transformer only: "pre" or "post"
    layer_norm_eps: float = 1e-5
    tie_output: bool = False  # output layer = token embedding (no bias)
    # What ESPnet's LMs do differently (asr.importers.espnet_lm sets these; the defaults are ours):
    embed_dim: int = 0  # 0: d_model. Else the embedding's size: the Transformer then maps it to d_model with
    # ESPnet's "linear" input layer (Linear, LayerNorm, dropout, ReLU); the LSTM's input size
    positions: str = "sinusoidal"  # transformer only: "sinusoidal" (x * sqrt(d) + sinusoids) or "none" (ESPnet's
    # TransformerLM default: no positional encoding, causal attention alone tells positions apart)

    def validate(self, prefix: str = "lm") -> None:
        _check(self.type in LM_TYPES, prefix, "type", " or ".join(map(repr, LM_TYPES)), self.type)
        _check(self.norm in ("pre", "post"), prefix, "norm", "'pre' or 'post'", self.norm)
        for k in ("d_model", "heads", "ffn_dim", "layers"):
            _check(getattr(self, k) >= 1, prefix, k, "a positive integer", getattr(self, k))
        _check(self.vocab_size >= 0, prefix, "vocab_size", "an integer >= 0", self.vocab_size)
        _check(self.embed_dim >= 0, prefix, "embed_dim", "an integer >= 0 (0: d_model)", self.embed_dim)
        _check(self.positions in ("sinusoidal", "none"), prefix, "positions", "'sinusoidal' or 'none'", self.positions)
        if self.tie_output and self.embed_dim:
            _check(self.embed_dim == self.d_model, prefix, "embed_dim", f"0 or d_model={self.d_model} with tie_output",
                   self.embed_dim)
        if self.type == "transformer":
            _check(self.d_model % self.heads == 0, prefix, "d_model", f"a multiple of heads={self.heads}",
                   self.d_model)
        _check(0.0 <= self.dropout < 1.0, prefix, "dropout", "a value in [0, 1)", self.dropout)
        _check(0 < self.layer_norm_eps < 1, prefix, "layer_norm_eps", "a value in (0, 1)", self.layer_norm_eps)


@dataclass
class LMDataConfig:
    """Where the text is and how it becomes batches of token sequences."""

    train: list[str] = field(default_factory=list)  # text files (one sentence a line, .gz too) or manifests
    dev: list[str] = field(default_factory=list)
    tokenizer: str = ""  # the ASR model's tokenizer (directory or .model): an LM must share its ids
    normalizer: str = "librispeech"  # as the ASR's transcripts (asr.text.normalize)
    max_tokens: int = 8000  # tokens per batch, padding included
    max_sentences: int = 256
    max_length: int = 400  # longer sentences (in tokens) are dropped at load (counted)
    num_buckets: int = 30
    num_workers: int = 0

    def validate(self, prefix: str = "data") -> None:
        for k in ("max_tokens", "max_sentences", "max_length", "num_buckets"):
            _check(getattr(self, k) >= 1, prefix, k, "a positive integer", getattr(self, k))
        _check(self.num_workers >= 0, prefix, "num_workers", "an integer >= 0", self.num_workers)


@dataclass
class LMExperimentConfig:
    """One LM experiment: everything ``asr lm train`` needs, saved beside the checkpoints."""

    lm: LMConfig = field(default_factory=LMConfig)
    data: LMDataConfig = field(default_factory=LMDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self) -> LMExperimentConfig:
        self.lm.validate()
        self.data.validate()
        self.train.validate()
        _check(self.train.best_metric != "dev_wer", "train", "best_metric", "'dev_loss' or 'dev_acc' for an LM",
               self.train.best_metric)
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_lm_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> LMExperimentConfig:
    """Read an LM experiment YAML (sections lm/data/train), apply ``--set`` overrides, validate."""
    data = read_config_file(path, "lm/data/train") if path is not None else {}
    if path is not None and "lm" not in data:
        raise ConfigError(f"{path}: expected a mapping with sections lm/data/train (an LM config has an 'lm' section)")
    apply_overrides(data, overrides or [])
    for k in ("train", "dev"):  # one file may be given as a string
        if isinstance(data.get("data", {}).get(k), str):
            data["data"][k] = [data["data"][k]]
    return build_config(LMExperimentConfig, data, path)


def save_lm_config(cfg: LMExperimentConfig, path: str | os.PathLike) -> None:
    save_config(cfg, path)
