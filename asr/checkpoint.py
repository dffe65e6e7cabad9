"""Saving and loading: atomic writes, safe loads, the self-contained model directory.

A model directory holds everything inference needs and nothing that can run code:

    config.yaml      the resolved experiment configuration (model section used to build the model)
    tokenizer.model  the SentencePiece model
    cmvn.json        global CMVN statistics (also inside the weights, as model buffers)
    model.pt         the weights: a plain state_dict, loaded with ``weights_only=True``
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from .config import Config, load_config, save_config

__all__ = ["atomic_save", "safe_load", "save_model_dir", "load_model", "MODEL_FILE", "CONFIG_FILE"]

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.yaml"
TOKENIZER_FILE = "tokenizer.model"
CMVN_FILE = "cmvn.json"


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file, flush and fsync it, then rename over ``path``.

    A crash at any point leaves either the old file or the new one, never a torn file.
    """
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


def safe_load(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> Any:
    """``torch.load`` with ``weights_only=True``: tensors and plain containers only, never code."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such checkpoint")
    try:
        return torch.load(p, map_location=map_location, weights_only=True)
    except Exception as e:
        raise ValueError(f"{p}: cannot load checkpoint safely ({e})") from e


def save_model_dir(
    out: str | os.PathLike,
    cfg: Config,
    state_dict: dict[str, torch.Tensor],
    tokenizer_model: str | os.PathLike | None = None,
    cmvn: str | os.PathLike | None = None,
) -> Path:
    """Write a model directory that ``load_model`` (and ``asr transcribe --model``) can use alone."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    save_config(cfg, d / CONFIG_FILE)
    for src, name in ((tokenizer_model, TOKENIZER_FILE), (cmvn, CMVN_FILE)):
        if src is not None and Path(src).resolve() != (d / name).resolve():
            shutil.copyfile(src, d / name)
    atomic_save({k: v.detach().cpu() for k, v in state_dict.items()}, d / MODEL_FILE)
    return d


def load_model(model_dir: str | os.PathLike, device: str | torch.device = "cpu"):
    """Build the model of a model directory, load its weights, and put it in eval mode on ``device``.

    The returned ``ASRModel`` carries ``.config`` (the full :class:`Config`) and ``.tokenizer``
    (an ``asr.text.Tokenizer``, or None when the directory has no tokenizer.model).
    """
    from .model import ASRModel

    d = Path(model_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such model directory")
    for name in (CONFIG_FILE, MODEL_FILE):
        if not (d / name).is_file():
            raise FileNotFoundError(f"{d}: not a model directory ({name} is missing)")
    cfg = load_config(d / CONFIG_FILE)
    model = ASRModel(cfg.model)
    state = safe_load(d / MODEL_FILE)
    if "model" in state and isinstance(state["model"], dict):  # a training checkpoint
        state = state["model"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{d / MODEL_FILE}: weights do not fit the config (missing {missing}, unexpected {unexpected})"
        )
    model.config = cfg
    model.tokenizer = None
    if (d / TOKENIZER_FILE).is_file():
        from .text import Tokenizer

        model.tokenizer = Tokenizer.load(d / TOKENIZER_FILE)
    return model.to(device).eval()
