"""Import an ESPnet2 Transformer ASR model (as published) into an ``asr`` model directory.

What ESPnet's Transformer does and how ``asr`` represents it (``ModelConfig``/``DataConfig`` keys):

    ESPnet                                        asr
    frontend default (STFT, power, librosa mel, log)  data.features: espnet, n_fft/win_length/hop_length
    normalize global_mvn (feats_stats.npz)        cmvn.json (GlobalCMVN), model.padding
    normalize utterance_mvn (norm_vars)           model.utterance_cmn (+ utterance_cvn), identity CMVN
    encoder_conf.input_layer conv2d/6/8, linear   model.frontend conv2d/conv2d6/conv2d8/linear_norm
    LayerNorm(eps=1e-12)                          model.layer_norm_eps: 1e-12
    decoder output_layer (own weight + bias)      model.tie_output: false
    model_conf.lsm_weight (KL, eps / (V - 1))     model.label_smoothing, label_smoothing_mode: espnet
    token_list [<blank>, <unk>, ..., <sos/eos>]   the same ids: tokenizer.model rewritten in that order

The encoder/decoder layers, positions (x * sqrt(d) + sinusoids), CTC head, sos = eos = V - 1,
blank 0 and the joint loss ``ctc_weight * ctc + (1 - ctc_weight) * att`` (each summed per
utterance, averaged over the batch) are already the same. Anything else (another encoder or
decoder, a non-default frontend, a key we do not know) is an :class:`EspnetImportError` naming
the config key and its value, raised before anything is written.

The imported model uses ``model.padding: exact``: a batch decodes exactly as ESPnet's
``Speech2Text`` decodes each utterance alone. ``padding: espnet`` reproduces ESPnet's training
batches instead (see tests/test_espnet_import.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from asr.atomic import staged_dir
from asr.config import ModelConfig
from asr.importers.espnet_config import EspnetImportError, convert_config, read_yaml
from asr.importers.sentencepiece_proto import reorder_pieces
from asr.importers.tensor_map import gather_tensors
from asr.text import Tokenizer

__all__ = ["EspnetImportError", "EspnetFiles", "find_espnet_files", "convert_config", "convert_state_dict",
           "import_espnet"]

log = logging.getLogger(__name__)


@dataclass
class EspnetFiles:
    config: Path  # exp/<asr exp>/config.yaml
    weights: Path  # exp/<asr exp>/*.pth
    stats: Path | None  # feats_stats.npz (global_mvn only)
    bpe: Path  # the SentencePiece model


# -------------------------------------------------------------------------------------------------
# Files: the published layout, paths resolved as ESPnet resolves them (relative to the model folder)


def _resolve(root: Path | None, value: str, key: str, config: Path) -> Path:
    p = Path(value)
    for cand in ([p] if p.is_absolute() else ([root / p] if root else []) + [config.parent / p, p]):
        if cand.is_file():
            return cand
    raise EspnetImportError(f"{config}: {key}={value!r}: no such file (looked relative to {root or config.parent})")


def find_espnet_files(
    root: str | os.PathLike | None = None,
    config: str | os.PathLike | None = None,
    weights: str | os.PathLike | None = None,
    stats: str | os.PathLike | None = None,
    bpe: str | os.PathLike | None = None,
) -> EspnetFiles:
    """The four files of a downloaded ESPnet2 model folder ``root`` (``exp/*/config.yaml`` of the ASR
    model, the ``*.pth`` beside it, and the stats file and BPE model the config names, relative to
    ``root``); explicit paths override each."""
    r = Path(root) if root is not None else None
    if r is not None and not r.is_dir():
        raise EspnetImportError(f"{r}: no such directory")
    if config is None:
        if r is None:
            raise EspnetImportError("give a model folder or --config")
        found = [c for c in sorted(r.glob("exp/*/config.yaml")) + sorted(r.glob("exp/*/*/config.yaml"))
                 if "encoder" in (yaml.safe_load(c.read_text()) or {})]  # the LM's config has no encoder
        if len(found) != 1:
            raise EspnetImportError(f"{r}: expected one ASR config.yaml under exp/, found {[str(f) for f in found]}"
                                    " (give --config)")
        config = found[0]
    cfg_path = Path(config)
    if not cfg_path.is_file():
        raise EspnetImportError(f"{cfg_path}: no such config file")
    cfg = read_yaml(cfg_path)
    if weights is None:
        pths = sorted(cfg_path.parent.glob("*.pth"))
        if len(pths) != 1:
            raise EspnetImportError(f"{cfg_path.parent}: expected one *.pth beside config.yaml, found "
                                    f"{[p.name for p in pths]} (give --weights)")
        weights = pths[0]
    if stats is None and cfg.get("normalize") == "global_mvn":
        sf = (cfg.get("normalize_conf") or {}).get("stats_file")
        if not sf:
            raise EspnetImportError(f"{cfg_path}: normalize_conf.stats_file is missing (give --stats)")
        stats = _resolve(r, sf, "normalize_conf.stats_file", cfg_path)
    if bpe is None:
        bm = cfg.get("bpemodel")
        if not bm:
            raise EspnetImportError(f"{cfg_path}: bpemodel is missing (give --bpe)")
        bpe = _resolve(r, bm, "bpemodel", cfg_path)
    for p, what in ((weights, "weights"), (stats, "stats"), (bpe, "bpe")):
        if p is not None and not Path(p).is_file():
            raise EspnetImportError(f"{p}: no such {what} file")
    return EspnetFiles(cfg_path, Path(weights), Path(stats) if stats else None, Path(bpe))


# -------------------------------------------------------------------------------------------------
# Weights: our name <- ESPnet names (several: concatenated along dim 0, as our fused projections)


def _name_map(cfg: ModelConfig) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}

    def lin(ours: str, *theirs: str) -> None:
        for p in ("weight", "bias"):
            names[f"{ours}.{p}"] = [f"{t}.{p}" for t in theirs]

    if cfg.frontend == "linear_norm":
        lin("frontend.proj", "encoder.embed.0")
        lin("frontend.norm", "encoder.embed.1")
    else:
        for i in range({"conv2d8": 3}.get(cfg.frontend, 2)):
            lin(f"frontend.conv.{2 * i}", f"encoder.embed.conv.{2 * i}")
        lin("frontend.proj", "encoder.embed.out" if cfg.frontend == "conv2d8" else "encoder.embed.out.0")
    for i in range(cfg.encoder_layers):
        o, t = f"encoder.layers.{i}", f"encoder.encoders.{i}"
        lin(f"{o}.attn.qkv", *(f"{t}.self_attn.linear_{x}" for x in "qkv"))
        lin(f"{o}.attn.out", f"{t}.self_attn.linear_out")
        lin(f"{o}.ffn.0", f"{t}.feed_forward.w_1")
        lin(f"{o}.ffn.3", f"{t}.feed_forward.w_2")
        lin(f"{o}.norm1", f"{t}.norm1")
        lin(f"{o}.norm2", f"{t}.norm2")
    if cfg.norm == "pre":
        lin("encoder.norm", "encoder.after_norm")
    lin("ctc", "ctc.ctc_lo")
    names["decoder.embed.weight"] = ["decoder.embed.0.weight"]
    for i in range(cfg.decoder_layers):
        o, t = f"decoder.layers.{i}", f"decoder.decoders.{i}"
        lin(f"{o}.self_attn.qkv", *(f"{t}.self_attn.linear_{x}" for x in "qkv"))
        lin(f"{o}.self_attn.out", f"{t}.self_attn.linear_out")
        lin(f"{o}.cross_attn.q", f"{t}.src_attn.linear_q")
        lin(f"{o}.cross_attn.kv", f"{t}.src_attn.linear_k", f"{t}.src_attn.linear_v")
        lin(f"{o}.cross_attn.out", f"{t}.src_attn.linear_out")
        lin(f"{o}.ffn.0", f"{t}.feed_forward.w_1")
        lin(f"{o}.ffn.3", f"{t}.feed_forward.w_2")
        for j in range(3):
            lin(f"{o}.norms.{j}", f"{t}.norm{j + 1}")
    if cfg.norm == "pre":
        lin("decoder.norm", "decoder.after_norm")
    lin("decoder.output", "decoder.output_layer")
    return names


# ESPnet buffers that hold no learned weights (the mel matrix, GlobalMVN's statistics: read from the stats file)
_IGNORED = ("frontend.logmel.melmat", "normalize.mean", "normalize.std")


def convert_state_dict(
    theirs: dict[str, torch.Tensor], model: torch.nn.Module, where: str = "weights"
) -> dict[str, torch.Tensor]:
    """Our state dict (CMVN buffers from ``model``) from ESPnet's; the first misfit is named with both shapes."""
    own = model.state_dict()
    gathered, used = gather_tensors(own, _name_map(model.cfg).items(), theirs, where, EspnetImportError,
                                    "the config's model needs")
    out = {**{k: v for k, v in own.items() if k.startswith("cmvn.")}, **gathered}
    extra = sorted(k for k in set(theirs) - used if k not in _IGNORED)
    if extra:
        raise EspnetImportError(f"{where}: tensor {extra[0]!r} {tuple(theirs[extra[0]].shape)} has no place in the "
                                "model the config describes")
    return out


# -------------------------------------------------------------------------------------------------


def _read_stats(path: Path, dim: int):
    from asr.data.cmvn import CMVNStats

    try:
        npz = np.load(path)
        count, total, total_sq = npz["count"], npz["sum"], npz["sum_square"]
    except (OSError, KeyError, ValueError) as e:
        raise EspnetImportError(f"{path}: not ESPnet feats_stats (count, sum, sum_square): {e}") from e
    if total.shape != (dim,):
        raise EspnetImportError(f"{path}: statistics of {total.shape} dimensions, the frontend gives {dim}")
    stats = CMVNStats(dim)
    stats.count = int(count)
    stats.sum = torch.from_numpy(np.asarray(total, dtype=np.float64))
    stats.sum_sq = torch.from_numpy(np.asarray(total_sq, dtype=np.float64))
    return stats


@contextlib.contextmanager
def staged_model_dir(out: str | os.PathLike, bpe: Path, tokens: list[str]) -> Iterator[Path]:
    """A temporary folder beside ``out`` holding ESPnet's BPE model rewritten so that its ids are
    ESPnet's ``token_list`` (checked: <blank> 0, <unk> 1, <sos/eos> last); the caller writes the
    rest into it, and it becomes ``out`` (which must be missing or empty) only if nothing failed."""
    try:
        sp_model = reorder_pieces(bpe.read_bytes(), tokens, str(bpe))
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise EspnetImportError(f"{bpe}: {e}") from None
    with staged_dir(out, EspnetImportError) as tmp:
        (tmp / "tokenizer.model").write_bytes(sp_model)
        Tokenizer.load(tmp / "tokenizer.model")
        yield tmp


def import_espnet(
    out: str | os.PathLike,
    root: str | os.PathLike | None = None,
    *,
    config: str | os.PathLike | None = None,
    weights: str | os.PathLike | None = None,
    stats: str | os.PathLike | None = None,
    bpe: str | os.PathLike | None = None,
) -> Path:
    """Write model directory ``out`` (config.yaml, model.pt, tokenizer.model, cmvn.json) from an ESPnet
    model; everything is checked first and the directory appears whole or not at all."""
    from asr.checkpoint import safe_load, save_model_dir
    from asr.model import ASRModel

    files = find_espnet_files(root, config, weights, stats, bpe)
    cfg = convert_config(read_yaml(files.config), str(files.config))
    tokens = read_yaml(files.config)["token_list"]
    model = ASRModel(cfg.model)
    try:
        theirs = safe_load(files.weights)
    except ValueError as e:
        raise EspnetImportError(str(e)) from None
    state = convert_state_dict(theirs, model, str(files.weights))
    model.load_state_dict(state)
    cmvn_stats = None
    if files.stats is not None and cfg.model.utterance_cmn is False:
        cmvn_stats = _read_stats(files.stats, cfg.model.input_dim)
        model.cmvn.load_stats(*cmvn_stats.mean_istd())
    with staged_model_dir(out, files.bpe, tokens) as tmp:
        cmvn_file = None
        if cmvn_stats is not None:
            cmvn_stats.save(tmp / "cmvn.json")
            cmvn_file = tmp / "cmvn.json"
        save_model_dir(tmp, cfg, model.state_dict(), None, cmvn_file)
    dest = Path(out)
    log.info("imported %s (%d parameters) into %s", files.weights, model.num_parameters(), dest)
    return dest
