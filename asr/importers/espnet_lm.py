"""Import an ESPnet2 language model (its TransformerLM or SequentialRNNLM) into an ``asr`` LM directory.

A published ESPnet model keeps its LM beside the ASR experiment (``exp/lm_train_*/config.yaml`` and
a ``*.pth``). What ESPnet's LMs are and how ``asr.lm`` represents them (``LMConfig`` keys):

    ESPnet (config.yaml)                      asr
    lm: transformer                           type: transformer (the decoder's blocks, no cross-attention)
      embed_unit < att_unit, input "linear"   embed_dim: embed_unit (Linear, LayerNorm, dropout, ReLU)
      att_unit, head, unit, layer             d_model, heads, ffn_dim, layers
      pos_enc: null | sinusoidal              positions: none | sinusoidal
      its LayerNorm (eps 1e-12)               layer_norm_eps: 1e-12, norm: pre
      decoder: Linear with bias               tie_output: false
    lm: seq_rnn, rnn_type lstm                type: lstm
      unit, nhid, nlayers, tie_weights        embed_dim, d_model, layers, tie_output
    token_list, bpemodel                      tokenizer.model rewritten in token_list order (the ASR import's way)

Anything else (a GRU or plain RNN, another LM class, an unknown key) is an :class:`EspnetImportError`
naming the key and value, raised before anything is written. Proof of equality: the log-probabilities
and searches of tests/test_espnet_lm.py, against fixtures ESPnet computed (tests/make_espnet_lm_fixtures.py).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from asr.importers.espnet import _resolve, staged_model_dir
from asr.importers.espnet_config import EspnetImportError, read_yaml
from asr.lm.config import LMConfig, LMDataConfig, LMExperimentConfig

__all__ = ["find_espnet_lm_files", "convert_lm_config", "convert_lm_state_dict", "import_espnet_lm"]

log = logging.getLogger(__name__)

TRANSFORMER_KEYS = {"pos_enc", "embed_unit", "att_unit", "head", "unit", "layer", "dropout_rate",
                    "positional_dropout_rate", "attention_dropout_rate"}  # fmt: skip
RNN_KEYS = {"unit", "nhid", "nlayers", "dropout_rate", "tie_weights", "rnn_type", "ignore_id"}


def find_espnet_lm_files(root: str | os.PathLike | None = None, config: str | os.PathLike | None = None,
                         weights: str | os.PathLike | None = None, bpe: str | os.PathLike | None = None,
                         ) -> tuple[Path, Path, Path]:  # fmt: skip
    """(config.yaml, weights, bpe.model) of the LM in a published ESPnet folder (``exp/*/config.yaml``
    with an ``lm`` key), or of the files given."""
    r = Path(root) if root is not None else None
    if config is None:
        if r is None:
            raise EspnetImportError("give the model folder or --config")
        found = [c for c in sorted(r.glob("exp/*/config.yaml")) + [r / "config.yaml"]
                 if c.is_file() and "lm" in read_yaml(c) and "lm_conf" in read_yaml(c)]  # fmt: skip
        if len(found) != 1:
            raise EspnetImportError(f"{r}: expected one LM config (exp/*/config.yaml with 'lm' and 'lm_conf'), "
                                    f"found {len(found)}: {[str(f) for f in found]}; give --config")  # fmt: skip
        config = found[0]
    cfg_path = Path(config)
    if weights is None:
        pths = sorted(cfg_path.parent.glob("*.pth"))
        best = [p for p in pths if p.name.startswith("valid.loss")] or pths
        if len(best) != 1:
            raise EspnetImportError(f"{cfg_path.parent}: expected one LM weights file (*.pth), found "
                                    f"{[p.name for p in pths]}; give --weights")  # fmt: skip
        weights = best[0]
    if bpe is None:
        value = read_yaml(cfg_path).get("bpemodel")
        if not value:
            raise EspnetImportError(f"{cfg_path}: bpemodel: expected the SentencePiece model's path; give --bpe")
        bpe = _resolve(r, value, "bpemodel", cfg_path)
    return cfg_path, Path(weights), Path(bpe)


def convert_lm_config(esp: dict[str, Any], where: str = "config.yaml") -> LMExperimentConfig:
    """Our :class:`LMExperimentConfig` for an ESPnet LM config (its ``token_list`` inline)."""
    kind, conf = esp.get("lm"), dict(esp.get("lm_conf") or {})
    tokens = esp.get("token_list")
    if not isinstance(tokens, list) or tokens[:2] != ["<blank>", "<unk>"] or tokens[-1] != "<sos/eos>":
        raise EspnetImportError(f"{where}: token_list: expected a list with <blank>, <unk> first and <sos/eos> last")
    known = {"transformer": TRANSFORMER_KEYS, "seq_rnn": RNN_KEYS}.get(kind)
    if known is None:
        raise EspnetImportError(f"{where}: lm: {kind!r} is not supported (transformer or seq_rnn)")
    unknown = sorted(set(conf) - known)
    if unknown:
        raise EspnetImportError(f"{where}: lm_conf.{unknown[0]}: not a key asr knows for lm {kind}")
    v = len(tokens)
    if kind == "transformer":
        pos = conf.get("pos_enc")
        if pos not in (None, "sinusoidal"):
            raise EspnetImportError(f"{where}: lm_conf.pos_enc: {pos!r} is not supported (null or sinusoidal)")
        att = conf.get("att_unit", 256)
        lm = LMConfig(type="transformer", vocab_size=v, d_model=att, heads=conf.get("head", 2),
                      ffn_dim=conf.get("unit", 1024), layers=conf.get("layer", 4),
                      dropout=conf.get("dropout_rate", 0.1), norm="pre", layer_norm_eps=1e-12, tie_output=False,
                      embed_dim=conf.get("embed_unit", 128), positions="sinusoidal" if pos else "none")  # fmt: skip
    else:
        rnn = str(conf.get("rnn_type", "lstm")).upper()
        if rnn != "LSTM":
            raise EspnetImportError(f"{where}: lm_conf.rnn_type: {conf['rnn_type']!r} is not supported (lstm)")
        unit = conf.get("unit", 650)
        lm = LMConfig(type="lstm", vocab_size=v, d_model=conf.get("nhid") or unit, layers=conf.get("nlayers", 2),
                      dropout=conf.get("dropout_rate", 0.0), tie_output=bool(conf.get("tie_weights", False)),
                      embed_dim=unit)  # fmt: skip
    cfg = LMExperimentConfig(lm, LMDataConfig())
    try:
        return cfg.validate()
    except ValueError as e:
        raise EspnetImportError(f"{where}: {e}") from None


def _name_map(cfg: LMConfig) -> dict[str, list[str]]:
    """Our tensor name -> ESPnet's tensor names (several: concatenated along dim 0)."""
    if cfg.type == "lstm":
        m = {"embed.weight": ["lm.encoder.weight"]}
        for i in range(cfg.layers):
            for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                m[f"rnn.{k}_l{i}"] = [f"lm.rnn.{k}_l{i}"]
        if not cfg.tie_output:
            m.update({f"output.{k}": [f"lm.decoder.{k}"] for k in ("weight", "bias")})
        return m
    m = {"embed.weight": ["lm.embed.weight"]}
    for k in ("weight", "bias"):
        m[f"input_layer.0.{k}"] = [f"lm.encoder.embed.0.{k}"]
        m[f"input_layer.1.{k}"] = [f"lm.encoder.embed.1.{k}"]
        m[f"norm.{k}"] = [f"lm.encoder.after_norm.{k}"]
        m[f"output.{k}"] = [f"lm.decoder.{k}"]
        for i in range(cfg.layers):
            ours, theirs = f"layers.{i}", f"lm.encoder.encoders.{i}"
            m[f"{ours}.self_attn.qkv.{k}"] = [f"{theirs}.self_attn.linear_{x}.{k}" for x in "qkv"]
            m[f"{ours}.self_attn.out.{k}"] = [f"{theirs}.self_attn.linear_out.{k}"]
            m[f"{ours}.ffn.0.{k}"] = [f"{theirs}.feed_forward.w_1.{k}"]
            m[f"{ours}.ffn.3.{k}"] = [f"{theirs}.feed_forward.w_2.{k}"]
            m[f"{ours}.norms.0.{k}"] = [f"{theirs}.norm1.{k}"]
            m[f"{ours}.norms.1.{k}"] = [f"{theirs}.norm2.{k}"]
    return m


def convert_lm_state_dict(theirs: dict[str, torch.Tensor], model: torch.nn.Module, where: str) -> dict:
    """ESPnet's LM state dict as our LM's; a missing tensor, a wrong shape or a tensor left over is an error."""
    own = model.state_dict()
    names = _name_map(model.cfg)
    if set(names) != set(own):
        raise AssertionError(f"name map out of date: {sorted(set(names) ^ set(own))[:3]}")
    out, used = {}, set()
    for ours, keys in names.items():
        missing = [k for k in keys if k not in theirs]
        if missing:
            raise EspnetImportError(f"{where}: has no tensor {missing[0]!r} (needed for {ours})")
        t = torch.cat([theirs[k] for k in keys]) if len(keys) > 1 else theirs[keys[0]]
        if tuple(t.shape) != tuple(own[ours].shape):
            raise EspnetImportError(f"{where}: {keys} give shape {tuple(t.shape)}, {ours} needs "
                                    f"{tuple(own[ours].shape)}")  # fmt: skip
        out[ours] = t.to(own[ours].dtype)
        used.update(keys)
    left = sorted(k for k in set(theirs) - used if not k.endswith(".pe"))
    if left:
        raise EspnetImportError(f"{where}: tensor {left[0]!r} has no place in the LM the config describes")
    return out


def import_espnet_lm(out: str | os.PathLike, root: str | os.PathLike | None = None, *,
                     config: str | os.PathLike | None = None, weights: str | os.PathLike | None = None,
                     bpe: str | os.PathLike | None = None) -> Path:  # fmt: skip
    """Write LM directory ``out`` (config.yaml, model.pt, tokenizer.model) from an ESPnet LM; everything
    is checked first and the directory appears whole or not at all."""
    from asr.checkpoint import safe_load
    from asr.lm.directory import save_lm_dir
    from asr.lm.model import build_lm

    cfg_path, w_path, bpe_path = find_espnet_lm_files(root, config, weights, bpe)
    esp = read_yaml(cfg_path)
    cfg = convert_lm_config(esp, str(cfg_path))
    model = build_lm(cfg.lm)
    try:
        theirs = safe_load(w_path)
    except ValueError as e:
        raise EspnetImportError(str(e)) from None
    model.load_state_dict(convert_lm_state_dict(theirs, model, str(w_path)))
    with staged_model_dir(out, bpe_path, esp["token_list"]) as tmp:
        cfg.data.tokenizer = ""
        save_lm_dir(tmp, cfg, model.state_dict())
    dest = Path(out)
    log.info("imported the %s LM %s into %s", cfg.lm.type, w_path, dest)
    return dest
