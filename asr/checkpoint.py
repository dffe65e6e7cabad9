"""Saving and loading: atomic writes, safe loads, the self-contained model directory.

A model directory holds everything inference needs and nothing that can run code:

    config.yaml      the resolved experiment configuration (model section used to build the model)
    tokenizer.model  the SentencePiece model
    cmvn.json        global CMVN statistics (also inside the weights, as model buffers)
    model.pt         the weights: a plain state_dict, loaded with ``weights_only=True``
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from asr.atomic import atomic_write
from asr.config import Config, save_config
from asr.text import TOKENIZER_FILE
from asr.whisper_text import WHISPER_TOKENIZER_FILE

__all__ = [
    "atomic_save",
    "check_state_fits",
    "init_files",
    "load_weights",
    "safe_load",
    "save_model_dir",
    "MODEL_FILE",
    "CONFIG_FILE",
]

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.yaml"
CMVN_FILE = "cmvn.json"

log = logging.getLogger(__name__)


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file, fsync it, rename it over ``path``, fsync the folder.

    A crash at any point leaves either the old file or the new one, never a torn file.
    """
    with atomic_write(path, "wb") as f:
        torch.save(obj, f)


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
    tok_name = tokenizer_file_name(tokenizer_model) if tokenizer_model else TOKENIZER_FILE
    for src, name in ((tokenizer_model, tok_name), (cmvn, CMVN_FILE)):
        if src is not None and Path(src).resolve() != (d / name).resolve():
            shutil.copyfile(src, d / name)
    atomic_save({k: v.detach().cpu() for k, v in state_dict.items()}, d / MODEL_FILE)
    return d


def tokenizer_file_name(src: str | os.PathLike) -> str:
    """The name a tokenizer file takes in a model directory: tokenizer.json (Whisper's) or tokenizer.model."""
    return WHISPER_TOKENIZER_FILE if Path(src).suffix == ".json" else TOKENIZER_FILE


def tokenizer_file(d: str | os.PathLike) -> Path | None:
    """The tokenizer in directory ``d``: SentencePiece's tokenizer.model, or a Whisper tokenizer.json."""
    for name in (TOKENIZER_FILE, WHISPER_TOKENIZER_FILE):
        if (Path(d) / name).is_file():
            return Path(d) / name
    return None


def check_state_fits(saved: dict[str, torch.Tensor], model: torch.nn.Module, path: str | os.PathLike) -> None:
    """The checkpoint's tensors fit the model the config builds: the first misfit is named."""
    own = model.state_dict()
    for name, t in own.items():
        if name not in saved:
            raise ValueError(f"{path}: has no tensor {name!r}, which the model the config describes needs")
        if tuple(saved[name].shape) != tuple(t.shape):
            raise ValueError(
                f"{path}: tensor {name!r} has shape {tuple(saved[name].shape)}, the model the config describes "
                f"needs {tuple(t.shape)}"
            )
    extra = sorted(set(saved) - set(own))
    if extra:
        raise ValueError(f"{path}: tensor {extra[0]!r} is not in the model the config describes")


def init_files(init: str | os.PathLike) -> tuple[Path, Path | None]:
    """``train.init`` resolved: (the weights, the CMVN statistics that go with them or None).

    A model directory gives its model.pt and cmvn.json; a checkpoint file gives itself and the cmvn.json
    of its experiment (beside it, or one folder up from checkpoints/)."""
    p = Path(init)
    if p.is_dir():
        weights = p / MODEL_FILE
        if not weights.is_file():
            raise FileNotFoundError(f"train.init: {p} is not a model directory ({MODEL_FILE} is missing)")
        near = [p / CMVN_FILE]
    elif p.is_file():
        weights, near = p, [p.parent / CMVN_FILE, p.parent.parent / CMVN_FILE]
    else:
        raise FileNotFoundError(f"train.init: {p}: no such model directory or checkpoint")
    return weights, next((c for c in near if c.is_file()), None)


def _model_state(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The weights in a model.pt, or in a training checkpoint (its ``model``)."""
    state = safe_load(path)
    if "model" in state and isinstance(state["model"], dict):  # a training checkpoint
        state = state["model"]
    return state


def load_init_weights(model: torch.nn.Module, path: str | os.PathLike) -> list[str]:
    """Fine-tuning's start (``train.init``): every tensor of ``model`` that ``path`` holds is loaded; the
    ones it lacks (what the new config adds, a CTC head say) keep their fresh values and are returned
    by name. A tensor of another shape, or one the new model has no place for, is an error naming it."""
    state = _model_state(path)
    own = model.state_dict()
    for name, t in state.items():
        if name not in own:
            raise ValueError(f"train.init: {path}: tensor {name!r} has no place in the model the config describes")
        if tuple(t.shape) != tuple(own[name].shape):
            raise ValueError(f"train.init: {path}: tensor {name!r} has shape {tuple(t.shape)}, the model the config "
                             f"describes needs {tuple(own[name].shape)}")
    fresh = sorted(set(own) - set(state))
    model.load_state_dict(state, strict=False)
    return fresh


def load_weights(model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Load a model.pt (or a training checkpoint's model) into ``model``; a misfit names the first tensor."""
    state = _model_state(path)
    check_state_fits(state, model, path)
    model.load_state_dict(state)
