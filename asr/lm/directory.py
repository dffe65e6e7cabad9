"""The LM directory, and the check that an LM can be fused with an ASR model.

    config.yaml      the LM experiment configuration (its ``lm`` section builds the network)
    tokenizer.model  the SentencePiece model (the ASR model's: an LM scores the same ids)
    model.pt         the weights: a plain state_dict, loaded with ``weights_only=True``

``asr lm train`` writes one (the experiment directory is one, as for ASR runs); ``load_lm`` reads it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from asr.checkpoint import CONFIG_FILE, MODEL_FILE, atomic_save, check_state_fits, safe_load
from asr.lm.config import LMExperimentConfig, load_lm_config, save_lm_config
from asr.lm.model import build_lm
from asr.text import TOKENIZER_FILE, Tokenizer

__all__ = ["LanguageModel", "load_lm", "save_lm_dir", "check_lm_fits", "is_lm_dir"]


@dataclass
class LanguageModel:
    """A loaded LM: the network (eval mode), its configuration, its tokenizer and where it came from."""

    model: torch.nn.Module  # TransformerLM or LSTMLM: forward(tokens) -> logits, step(tokens, cache)
    config: LMExperimentConfig
    tokenizer: Tokenizer | None
    path: Path
    _int8: torch.nn.Module | None = field(default=None, repr=False)  # quantize_lm(model), made once when asked

    @property
    def vocab_size(self) -> int:
        return self.config.lm.vocab_size

    def network(self, quantized: bool = False) -> torch.nn.Module:
        """The network fusion runs: ``model``, or its copy with int8 products (``decode.quantize_lm``)."""
        if not quantized:
            return self.model
        device = next(self.model.parameters()).device
        if device.type != "cpu":
            raise ValueError(f"--quantize-lm (decode.quantize_lm): int8 products are for decoding on a CPU, the LM "
                             f"{self.path} is on {device}; there decode with --precision auto instead")  # fmt: skip
        if self._int8 is None:
            from asr.lm.quantize import quantize_lm

            self._int8 = quantize_lm(self.model)
        return self._int8

    def to(self, device: str | torch.device) -> LanguageModel:
        self.model.to(device)
        self._int8 = None  # made again, from the moved network, when next asked
        return self


def is_lm_dir(path: str | os.PathLike) -> bool:
    """True when ``path`` holds an LM config (a config.yaml with an ``lm`` section)."""
    import yaml

    p = Path(path) / CONFIG_FILE
    try:
        return p.is_file() and "lm" in (yaml.safe_load(p.read_text()) or {})
    except yaml.YAMLError:
        return False


def save_lm_dir(out: str | os.PathLike, cfg: LMExperimentConfig, state_dict: dict[str, torch.Tensor],
                tokenizer_model: str | os.PathLike | None = None) -> Path:  # fmt: skip
    """Write an LM directory; ``state_dict`` is the LM's own (no ``lm.`` prefix)."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    save_lm_config(cfg, d / CONFIG_FILE)
    if tokenizer_model is not None and Path(tokenizer_model).resolve() != (d / TOKENIZER_FILE).resolve():
        shutil.copyfile(tokenizer_model, d / TOKENIZER_FILE)
    atomic_save({k: v.detach().cpu() for k, v in state_dict.items()}, d / MODEL_FILE)
    return d


def load_lm(lm_dir: str | os.PathLike, device: str | torch.device = "cpu") -> LanguageModel:
    """The :class:`LanguageModel` of an LM directory (weights loaded, eval mode, on ``device``)."""
    d = Path(lm_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such LM directory")
    for name in (CONFIG_FILE, MODEL_FILE):
        if not (d / name).is_file():
            raise FileNotFoundError(f"{d}: not an LM directory ({name} is missing)")
    if not is_lm_dir(d):
        raise ValueError(f"{d / CONFIG_FILE}: not an LM config (no 'lm' section); is this an ASR model directory?")
    cfg = load_lm_config(d / CONFIG_FILE)
    model = build_lm(cfg.lm)
    state = safe_load(d / MODEL_FILE)
    if "model" in state and isinstance(state["model"], dict):  # a training checkpoint (LMLoss: "lm." prefix)
        state = {k.removeprefix("lm."): v for k, v in state["model"].items()}
    check_state_fits(state, model, d / MODEL_FILE)
    model.load_state_dict(state)
    tok = Tokenizer.load(d / TOKENIZER_FILE) if (d / TOKENIZER_FILE).is_file() else None
    return LanguageModel(model.to(device).eval(), cfg, tok, d)


def check_lm_fits(lm: LanguageModel, vocab_size: int, tokenizer: Tokenizer | None, what: str = "the ASR model") -> None:
    """An LM scores the ASR model's ids only if both share one vocabulary: the same size and, when
    both have a tokenizer, the same pieces in the same order. The error names both sizes and files."""
    lm_tok = lm.tokenizer.model_path if lm.tokenizer is not None else "no tokenizer.model"
    asr_tok = tokenizer.model_path if tokenizer is not None else "no tokenizer.model"
    same = lm.vocab_size == vocab_size
    if same and lm.tokenizer is not None and tokenizer is not None:
        same = lm.tokenizer.vocabulary() == tokenizer.vocabulary()
    if not same:
        raise ValueError(
            f"the LM {lm.path} has a vocabulary of {lm.vocab_size} ids (tokenizer {lm_tok}), {what} has "
            f"{vocab_size} (tokenizer {asr_tok}): an LM must be trained with the ASR model's tokenizer "
            f"(asr lm train --tokenizer <the ASR model directory>)"
        )
