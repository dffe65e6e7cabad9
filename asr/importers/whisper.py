"""Import a Whisper model, in any of the three forms people hold, into an ``asr`` model directory.

    form                                   what it is                                   read with
    OpenAI checkpoint (``tiny.en.pt``)     ``dims`` + ``model_state_dict`` (float16)    torch.load(weights_only=True)
    Hugging Face folder                    config.json + model.safetensors or            safetensors / torch.load
                                           pytorch_model.bin, tokenizer.json
    CTranslate2 / faster-whisper folder    model.bin (float32/16, bfloat16),            this module (its layout)
                                           config.json, tokenizer.json

Each form is first read into OpenAI's names and shapes, then one table maps those to ``asr``'s:

    Whisper                                asr (ModelConfig / DataConfig keys)
    log-mel, 30-second windows             data.features: whisper, data.pad_to: 30
    Conv1d + GELU, Conv1d/2 + GELU         model.frontend: conv1d
    sinusoids / learned positions          model.positions: whisper (the encoder's table is kept exactly)
    query, key (no bias), value            one fused qkv Linear whose key bias is 0: a bias on keys adds
                                           the same amount to every score of a query, so softmax
                                           ignores it (what the model computes is unchanged)
    GELU MLP                               model.activation: gelu
    tied output over the embedding         model.tie_output: true
    <|startoftranscript|>, <|endoftext|>   model.sos_id, model.eos_id; decode.rules: whisper

Int8 CTranslate2 weights are refused: they are not the model's weights, only close to them.
A tensor that does not fit names itself and both shapes; the directory appears whole or not at all.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
from pathlib import Path

import torch

from asr.atomic import staged_dir
from asr.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig
from asr.importers.tensor_map import gather_tensors
from asr.whisper_text import WHISPER_TOKENIZER_FILE, WhisperTokenizer, need_whisper_extra

__all__ = ["WhisperImportError", "read_whisper", "import_whisper", "whisper_config", "to_asr_state", "to_openai_state"]

log = logging.getLogger(__name__)

DIMS = ("n_mels", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer", "n_vocab", "n_text_ctx",
        "n_text_state", "n_text_head", "n_text_layer")


class WhisperImportError(ValueError):
    """A Whisper model that cannot be imported; the message names the file and the key or tensor."""


# -------------------------------------------------------------------------------------------------
# The three forms, each read into (dims, OpenAI state dict, tokenizer.json or None)


def read_whisper(src: str | os.PathLike) -> tuple[dict[str, int], dict[str, torch.Tensor], Path | None]:
    """(dims, state dict in OpenAI's names as float32, the form's tokenizer.json or None) of ``src``:
    an OpenAI ``.pt`` file, a Hugging Face folder or a CTranslate2 folder."""
    p = Path(src)
    if p.is_file():
        return (*_read_openai(p), None)
    if not p.is_dir():
        raise WhisperImportError(f"{p}: no such file or folder")
    tok = p / WHISPER_TOKENIZER_FILE
    tok_file = tok if tok.is_file() else None
    if (p / "model.bin").is_file():
        return (*_read_ct2(p), tok_file)
    if (p / "config.json").is_file():
        return (*_read_hf(p), tok_file)
    raise WhisperImportError(f"{p}: neither a CTranslate2 folder (model.bin) nor a Hugging Face folder (config.json)")


def _read_openai(path: Path) -> tuple[dict[str, int], dict[str, torch.Tensor]]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise WhisperImportError(f"{path}: cannot be read as a checkpoint with weights_only=True ({e})") from None
    if not isinstance(ckpt, dict) or "dims" not in ckpt or "model_state_dict" not in ckpt:
        keys = sorted(ckpt)[:6] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise WhisperImportError(f"{path}: not an OpenAI Whisper checkpoint (needs 'dims' and 'model_state_dict'; "
                                 f"has {keys})")
    dims = ckpt["dims"]
    missing = [k for k in DIMS if k not in dims]
    if missing:
        raise WhisperImportError(f"{path}: dims has no {missing[0]!r}")
    return {k: int(dims[k]) for k in DIMS}, {k: v.float() for k, v in ckpt["model_state_dict"].items()}


def _read_hf(folder: Path) -> tuple[dict[str, int], dict[str, torch.Tensor]]:
    cfg_file = folder / "config.json"
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise WhisperImportError(f"{cfg_file}: not JSON ({e})") from None
    if cfg.get("model_type") != "whisper":
        raise WhisperImportError(f"{cfg_file}: model_type is {cfg.get('model_type')!r}, not 'whisper'")
    if cfg.get("activation_function", "gelu") != "gelu":
        raise WhisperImportError(f"{cfg_file}: activation_function {cfg['activation_function']!r} (Whisper's is gelu)")
    try:
        dims = {"n_mels": cfg["num_mel_bins"], "n_audio_ctx": cfg["max_source_positions"], "n_audio_state":
                cfg["d_model"], "n_audio_head": cfg["encoder_attention_heads"], "n_audio_layer": cfg["encoder_layers"],
                "n_vocab": cfg["vocab_size"], "n_text_ctx": cfg["max_target_positions"], "n_text_state":
                cfg["d_model"], "n_text_head": cfg["decoder_attention_heads"], "n_text_layer": cfg["decoder_layers"]}
    except KeyError as e:
        raise WhisperImportError(f"{cfg_file}: has no key {e.args[0]!r}") from None
    if (folder / "model.safetensors").is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise need_whisper_extra("reading model.safetensors") from None
        try:
            theirs = load_file(folder / "model.safetensors")
        except Exception as e:
            raise WhisperImportError(f"{folder / 'model.safetensors'}: cannot be read ({e})") from None
    elif (folder / "pytorch_model.bin").is_file():
        try:
            theirs = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as e:
            raise WhisperImportError(f"{folder / 'pytorch_model.bin'}: cannot be read with weights_only=True ({e})"
                                     ) from None
    else:
        raise WhisperImportError(f"{folder}: no model.safetensors or pytorch_model.bin")
    state = {}
    for name, t in theirs.items():
        ours = _hf_name(name)
        if ours is not None:
            state[ours] = t.float()
    return dims, state


_HF_PARTS = [("self_attn_layer_norm", "attn_ln"), ("encoder_attn_layer_norm", "cross_attn_ln"),
             ("final_layer_norm", "mlp_ln"), ("self_attn.", "attn."), ("encoder_attn.", "cross_attn."),
             ("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "out"), ("fc1", "mlp.0"),
             ("fc2", "mlp.2"), (".layers.", ".blocks.")]


def _hf_name(name: str) -> str | None:
    """OpenAI's name of a Hugging Face tensor (None: the tied output projection, the same as the embedding)."""
    if name == "proj_out.weight":
        return None
    name = name.removeprefix("model.")
    fixed = {"encoder.embed_positions.weight": "encoder.positional_embedding",
             "decoder.embed_positions.weight": "decoder.positional_embedding",
             "decoder.embed_tokens.weight": "decoder.token_embedding.weight",
             "encoder.layer_norm.weight": "encoder.ln_post.weight", "encoder.layer_norm.bias": "encoder.ln_post.bias",
             "decoder.layer_norm.weight": "decoder.ln.weight", "decoder.layer_norm.bias": "decoder.ln.bias"}
    if name in fixed:
        return fixed[name]
    for a, b in _HF_PARTS:
        name = name.replace(a, b)
    return name


# CTranslate2's model.bin (binary version 6): a header, then named tensors, then aliases.
_CT2_TYPES = {0: (torch.float32, 4), 1: (torch.int8, 1), 2: (torch.int16, 2), 3: (torch.int32, 4),
              4: (torch.float16, 2), 5: (torch.bfloat16, 2)}


def read_ct2_variables(path: Path) -> dict[str, torch.Tensor]:
    """Every variable of a CTranslate2 model.bin, by name (aliases resolved)."""
    data = path.read_bytes()
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise WhisperImportError(f"{path}: truncated at byte {pos} (expected {size} more)")
        out = struct.unpack_from(fmt, data, pos)
        pos += size
        return out[0]

    def string() -> str:
        nonlocal pos
        n = take("<H")
        s = data[pos : pos + n - 1].decode("utf-8")
        pos += n
        return s

    version = take("<I")
    if version != 6:
        raise WhisperImportError(f"{path}: CTranslate2 binary version {version}; this reader knows version 6")
    spec, _revision = string(), take("<I")
    if spec != "WhisperSpec":
        raise WhisperImportError(f"{path}: a CTranslate2 {spec}, not a WhisperSpec")
    out: dict[str, torch.Tensor] = {}
    for _ in range(take("<I")):
        name = string()
        shape = [take("<I") for _ in range(take("<B"))]
        type_id, nbytes = take("<B"), take("<I")
        if type_id not in _CT2_TYPES:
            raise WhisperImportError(f"{path}: variable {name!r} has unknown type id {type_id}")
        dtype, size = _CT2_TYPES[type_id]
        if pos + nbytes > len(data):
            raise WhisperImportError(f"{path}: truncated inside variable {name!r}")
        count = 1
        for d in shape:
            count *= d
        if count * size != nbytes:
            raise WhisperImportError(f"{path}: variable {name!r} of shape {shape} holds {nbytes} bytes")
        raw = bytearray(data[pos : pos + nbytes])
        out[name] = (torch.frombuffer(raw, dtype=dtype) if nbytes else torch.empty(0, dtype=dtype)).reshape(shape)
        pos += nbytes
    for _ in range(take("<I")):
        alias, target = string(), string()
        out[alias] = out[target]
    return out


def _read_ct2(folder: Path) -> tuple[dict[str, int], dict[str, torch.Tensor]]:
    path = folder / "model.bin"
    v = read_ct2_variables(path)
    if any(k.endswith("weight_scale") for k in v) or v["decoder/embeddings/weight"].dtype in (torch.int8, torch.int16):
        raise WhisperImportError(
            f"{path}: int8-quantised weights are only close to the model's, and asr imports models exactly: convert "
            "the original with ct2-transformers-converter --quantization float16 (or float32/bfloat16)"
        )

    def t(name: str) -> torch.Tensor:
        if name not in v:
            raise WhisperImportError(f"{path}: has no variable {name!r}")
        return v[name].float()

    state: dict[str, torch.Tensor] = {}
    for side in ("encoder", "decoder"):
        n_layers = len({k.split("/")[1] for k in v if re.match(rf"{side}/layer_\d+/", k)})
        for i in range(n_layers):
            src, dst = f"{side}/layer_{i}", f"{side}.blocks.{i}"
            d = t(f"{src}/self_attention/linear_1/weight").shape[0]
            w, b = t(f"{src}/self_attention/linear_0/weight"), t(f"{src}/self_attention/linear_0/bias")
            for j, part in enumerate(("query", "key", "value")):
                state[f"{dst}.attn.{part}.weight"] = w[j * d : (j + 1) * d]
                if part != "key":
                    state[f"{dst}.attn.{part}.bias"] = b[j * d : (j + 1) * d]
            state[f"{dst}.attn.out.weight"] = t(f"{src}/self_attention/linear_1/weight")
            state[f"{dst}.attn.out.bias"] = t(f"{src}/self_attention/linear_1/bias")
            for a, o in (("self_attention/layer_norm", "attn_ln"), ("ffn/layer_norm", "mlp_ln")):
                state[f"{dst}.{o}.weight"], state[f"{dst}.{o}.bias"] = t(f"{src}/{a}/gamma"), t(f"{src}/{a}/beta")
            for a, o in (("ffn/linear_0", "mlp.0"), ("ffn/linear_1", "mlp.2")):
                state[f"{dst}.{o}.weight"], state[f"{dst}.{o}.bias"] = t(f"{src}/{a}/weight"), t(f"{src}/{a}/bias")
            if side == "decoder":
                state[f"{dst}.cross_attn.query.weight"] = t(f"{src}/attention/linear_0/weight")
                state[f"{dst}.cross_attn.query.bias"] = t(f"{src}/attention/linear_0/bias")
                kv_w, kv_b = t(f"{src}/attention/linear_1/weight"), t(f"{src}/attention/linear_1/bias")
                state[f"{dst}.cross_attn.key.weight"], state[f"{dst}.cross_attn.value.weight"] = kv_w[:d], kv_w[d:]
                state[f"{dst}.cross_attn.value.bias"] = kv_b[d:]
                state[f"{dst}.cross_attn.out.weight"] = t(f"{src}/attention/linear_2/weight")
                state[f"{dst}.cross_attn.out.bias"] = t(f"{src}/attention/linear_2/bias")
                state[f"{dst}.cross_attn_ln.weight"] = t(f"{src}/attention/layer_norm/gamma")
                state[f"{dst}.cross_attn_ln.bias"] = t(f"{src}/attention/layer_norm/beta")
    for i in (1, 2):
        state[f"encoder.conv{i}.weight"], state[f"encoder.conv{i}.bias"] = (t(f"encoder/conv{i}/weight"),
                                                                            t(f"encoder/conv{i}/bias"))
    state["encoder.positional_embedding"] = t("encoder/position_encodings/encodings")
    state["encoder.ln_post.weight"], state["encoder.ln_post.bias"] = t("encoder/layer_norm/gamma"), t(
        "encoder/layer_norm/beta")
    state["decoder.token_embedding.weight"] = t("decoder/embeddings/weight")
    state["decoder.positional_embedding"] = t("decoder/position_encodings/encodings")
    state["decoder.ln.weight"], state["decoder.ln.bias"] = t("decoder/layer_norm/gamma"), t("decoder/layer_norm/beta")
    emb, conv1 = state["decoder.token_embedding.weight"], state["encoder.conv1.weight"]
    n_enc = len({k.split(".")[2] for k in state if k.startswith("encoder.blocks.")})
    n_dec = len({k.split(".")[2] for k in state if k.startswith("decoder.blocks.")})
    dims = {"n_mels": conv1.shape[1], "n_audio_ctx": state["encoder.positional_embedding"].shape[0],
            "n_audio_state": conv1.shape[0], "n_audio_head": int(v["encoder/num_heads"]), "n_audio_layer": n_enc,
            "n_vocab": emb.shape[0], "n_text_ctx": state["decoder.positional_embedding"].shape[0],
            "n_text_state": emb.shape[1], "n_text_head": int(v["decoder/num_heads"]), "n_text_layer": n_dec}
    return dims, state


# -------------------------------------------------------------------------------------------------
# OpenAI's names <-> asr's


def whisper_config(dims: dict[str, int], tokenizer: WhisperTokenizer, ffn_dim: int) -> Config:
    """The ``asr`` configuration of a Whisper model of these dimensions."""
    if dims["n_audio_state"] != dims["n_text_state"]:
        raise WhisperImportError(f"n_audio_state {dims['n_audio_state']} != n_text_state {dims['n_text_state']}: "
                                 "asr's decoder reads the encoder's width")
    model = ModelConfig(
        input_dim=dims["n_mels"], d_model=dims["n_audio_state"], heads=dims["n_audio_head"], ffn_dim=ffn_dim,
        encoder_layers=dims["n_audio_layer"], decoder_layers=dims["n_text_layer"], dropout=0.0, frontend="conv1d",
        norm="pre", vocab_size=dims["n_vocab"], ctc_weight=0.0, ctc_head=False, label_smoothing=0.0,
        decoder_heads=dims["n_text_head"], activation="gelu", positions="whisper", max_source_len=dims["n_audio_ctx"],
        max_target_len=dims["n_text_ctx"], sos_id=tokenizer.sot, eos_id=tokenizer.eot,
        blank_id=tokenizer.no_speech, prompt=tokenizer.prompt("en"),
    )
    data = DataConfig(features="whisper", num_mel_bins=dims["n_mels"], pad_to=30.0, normalizer="none")
    decode = DecodeConfig(mode="attention", beam_size=5, ctc_weight=0.0, rules="whisper", max_len_ratio=1.0)
    return Config(model=model, data=data, train=TrainConfig(), decode=decode).validate()


def identity_cmvn(dim: int):
    """CMVN statistics of mean 0 and variance 1: what a fine-tuning run (``train.init``) keeps, so that
    the model reads Whisper's log-mel as Whisper does."""
    from asr.data.cmvn import CMVNStats

    stats = CMVNStats(dim)
    stats.count, stats.sum_sq = 1, torch.ones(dim, dtype=torch.float64)
    return stats


def _pairs(dims: dict[str, int]) -> list[tuple[str, list[str]]]:
    """(asr name, OpenAI names concatenated along rows into it; '' stands for a zero key bias)."""
    out = [("frontend.conv1.weight", ["encoder.conv1.weight"]), ("frontend.conv1.bias", ["encoder.conv1.bias"]),
           ("frontend.conv2.weight", ["encoder.conv2.weight"]), ("frontend.conv2.bias", ["encoder.conv2.bias"]),
           ("encoder.pos.table", ["encoder.positional_embedding"]),
           ("encoder.norm.weight", ["encoder.ln_post.weight"]), ("encoder.norm.bias", ["encoder.ln_post.bias"]),
           ("decoder.embed.weight", ["decoder.token_embedding.weight"]),
           ("decoder.pos.table", ["decoder.positional_embedding"]),
           ("decoder.norm.weight", ["decoder.ln.weight"]), ("decoder.norm.bias", ["decoder.ln.bias"])]

    def attn(ours: str, theirs: str, fused: bool) -> None:
        if fused:
            out.append((f"{ours}.qkv.weight", [f"{theirs}.{p}.weight" for p in ("query", "key", "value")]))
            out.append((f"{ours}.qkv.bias", [f"{theirs}.query.bias", "", f"{theirs}.value.bias"]))
        else:
            out.append((f"{ours}.q.weight", [f"{theirs}.query.weight"]))
            out.append((f"{ours}.q.bias", [f"{theirs}.query.bias"]))
            out.append((f"{ours}.kv.weight", [f"{theirs}.key.weight", f"{theirs}.value.weight"]))
            out.append((f"{ours}.kv.bias", ["", f"{theirs}.value.bias"]))
        out.append((f"{ours}.out.weight", [f"{theirs}.out.weight"]))
        out.append((f"{ours}.out.bias", [f"{theirs}.out.bias"]))

    def mlp(ours: str, theirs: str) -> None:
        for a, b in (("0", "0"), ("3", "2")):
            for kind in ("weight", "bias"):
                out.append((f"{ours}.{a}.{kind}", [f"{theirs}.{b}.{kind}"]))

    def norm(ours: str, theirs: str) -> None:
        out.extend((f"{ours}.{k}", [f"{theirs}.{k}"]) for k in ("weight", "bias"))

    for i in range(dims["n_audio_layer"]):
        o, t = f"encoder.layers.{i}", f"encoder.blocks.{i}"
        attn(f"{o}.attn", f"{t}.attn", True)
        mlp(f"{o}.ffn", f"{t}.mlp")
        norm(f"{o}.norm1", f"{t}.attn_ln")
        norm(f"{o}.norm2", f"{t}.mlp_ln")
    for i in range(dims["n_text_layer"]):
        o, t = f"decoder.layers.{i}", f"decoder.blocks.{i}"
        attn(f"{o}.self_attn", f"{t}.attn", True)
        attn(f"{o}.cross_attn", f"{t}.cross_attn", False)
        mlp(f"{o}.ffn", f"{t}.mlp")
        norm(f"{o}.norms.0", f"{t}.attn_ln")
        norm(f"{o}.norms.1", f"{t}.cross_attn_ln")
        norm(f"{o}.norms.2", f"{t}.mlp_ln")
    return out


_IGNORED = {"alignment_heads"}


def to_asr_state(theirs: dict[str, torch.Tensor], model: torch.nn.Module, dims: dict[str, int], where: str
                 ) -> dict[str, torch.Tensor]:
    """``model``'s state dict from OpenAI-named tensors; a missing, misshapen or unused tensor is an
    error naming it and both shapes."""
    own = model.state_dict()
    gathered, used = gather_tensors(own, _pairs(dims), theirs, where, WhisperImportError, "the dims need")
    out = {**own, **gathered}  # CMVN stays the identity
    extra = sorted(k for k in set(theirs) - used if k not in _IGNORED and not k.endswith("key.bias"))
    if extra:
        raise WhisperImportError(f"{where}: tensor {extra[0]!r} {tuple(theirs[extra[0]].shape)} has no place in a "
                                 "Whisper model")
    return out


def to_openai_state(ours: dict[str, torch.Tensor], dims: dict[str, int]) -> dict[str, torch.Tensor]:
    """The OpenAI-named state dict of an imported model's tensors (the zero key biases dropped):
    what openai-whisper's ``Whisper(dims).load_state_dict`` takes."""
    out: dict[str, torch.Tensor] = {}
    for name, srcs in _pairs(dims):
        parts = ours[name].chunk(len(srcs), 0)
        for s, t in zip(srcs, parts, strict=True):
            if s:
                out[s] = t.clone()
    return out


def import_whisper(src: str | os.PathLike, out: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> Path:
    """Write model directory ``out`` (config.yaml, model.pt, tokenizer.json) from a Whisper model in
    any form; ``tokenizer``: a tokenizer.json (or a folder holding one), needed for an OpenAI
    checkpoint, which carries none."""
    from asr.checkpoint import save_model_dir
    from asr.model import ASRModel

    dims, theirs, tok_file = read_whisper(src)
    if tokenizer is not None:
        tok_file = Path(tokenizer) / WHISPER_TOKENIZER_FILE if Path(tokenizer).is_dir() else Path(tokenizer)
    if tok_file is None:
        raise WhisperImportError(f"{src}: carries no tokenizer.json; give one with --tokenizer (the tokenizer.json "
                                 "of the Hugging Face or faster-whisper folder of the same model)")
    try:
        tok = WhisperTokenizer.for_model(tok_file, dims["n_vocab"], f"the model {src}")
    except ValueError as e:
        raise WhisperImportError(str(e)) from None
    mlp = theirs.get("encoder.blocks.0.mlp.0.weight")
    cfg = whisper_config(dims, tok, mlp.shape[0] if mlp is not None else 4 * dims["n_audio_state"])
    model = ASRModel(cfg.model)
    model.load_state_dict(to_asr_state(theirs, model, dims, str(src)))
    dest = Path(out)
    with staged_dir(dest, WhisperImportError) as tmp:
        shutil.copyfile(tok_file, tmp / WHISPER_TOKENIZER_FILE)
        identity_cmvn(dims["n_mels"]).save(tmp / "cmvn.json")  # Whisper's features go in as they are
        save_model_dir(tmp, cfg, model.state_dict())
    log.info("imported %s (%d parameters) into %s", src, model.num_parameters(), dest)
    return dest
