"""ESPnet's ASR ``config.yaml`` in ``asr``'s terms: every key that shapes the model is mapped or refused.

``convert_config`` reads the encoder, decoder, frontend, normalisation and model sections of a
published ESPnet2 Transformer config and returns our :class:`~asr.config.Config`; a key it does
not know, or a value it cannot represent, is an :class:`EspnetImportError` naming the key and its
value (see ``asr.importers.espnet`` for the mapping table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from asr.config import Config, DecodeConfig, ModelConfig

__all__ = ["EspnetImportError", "INPUT_LAYERS", "convert_config", "read_yaml"]


class EspnetImportError(ValueError):
    """An ESPnet model that ``asr`` cannot represent, or files that do not fit together."""


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise EspnetImportError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise EspnetImportError(f"{path}: expected a mapping (an ESPnet config.yaml)")
    return data


# -------------------------------------------------------------------------------------------------
# Config: every key that shapes the model is either mapped or refused by name


class _Conf:
    """One ``*_conf`` section: values taken by name; :meth:`done` refuses keys nobody asked for."""

    def __init__(self, where: str, section: str, data: dict | None):
        self.where, self.section, self.data, self.used = where, section, dict(data or {}), set()

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.data.get(key, default)

    def expect(self, key: str, allowed: tuple, default: Any = None) -> Any:
        value = self.get(key, default)
        if value not in allowed:
            raise EspnetImportError(
                f"{self.where}: {self.section}.{key}={value!r} is not supported (supported: "
                f"{', '.join(map(repr, allowed))})"
            )
        return value

    def ignore(self, *keys: str) -> None:
        self.used.update(keys)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            k = unknown[0]
            raise EspnetImportError(f"{self.where}: unknown key {self.section}.{k}={self.data[k]!r}")


INPUT_LAYERS = {"conv2d": "conv2d", "conv2d6": "conv2d6", "conv2d8": "conv2d8", "linear": "linear_norm"}
_TRAINING_DROPOUTS = ("positional_dropout_rate", "attention_dropout_rate", "self_attention_dropout_rate",
                      "src_attention_dropout_rate")


def convert_config(esp: dict[str, Any], where: str = "config.yaml") -> Config:
    """Our :class:`Config` for an ESPnet ASR config (its ``token_list`` must be inline)."""

    def top(key: str, allowed: tuple, default: Any = None) -> Any:
        value = esp.get(key, default)
        if value not in allowed:
            raise EspnetImportError(f"{where}: {key}={value!r} is not supported (supported: "
                                    f"{', '.join(map(repr, allowed))})")
        return value

    top("model", ("espnet",), "espnet")
    top("encoder", ("transformer",))
    top("decoder", ("transformer",))
    top("frontend", ("default",), "default")
    top("normalize", ("global_mvn", "utterance_mvn"), None)
    for key in ("preencoder", "postencoder"):
        top(key, (None,))
    top("token_type", ("bpe",), "bpe")
    if esp.get("input_size") is not None:
        top("input_size", (None,))
    tokens = esp.get("token_list")
    if not isinstance(tokens, list) or len(tokens) < 3:
        raise EspnetImportError(f"{where}: token_list: expected the list of tokens, got {type(tokens).__name__}")
    special = (tokens[0], tokens[1], tokens[-1])
    if special != ("<blank>", "<unk>", "<sos/eos>"):
        raise EspnetImportError(f"{where}: token_list: expected <blank>, <unk> first and <sos/eos> last, got "
                                f"{special}")

    m = ModelConfig(vocab_size=len(tokens), layer_norm_eps=1e-12, tie_output=False, label_smoothing_mode="espnet")
    # decoded as ESPnet's Speech2Text decodes (its rules, maxlenratio 0: end detection)
    cfg = Config(model=m, decode=DecodeConfig(beam_size=20, ctc_weight=0.3, rules="espnet", max_len_ratio=0.0))
    d = cfg.data
    d.features, d.specaugment = "espnet", None

    fc = _Conf(where, "frontend_conf", esp.get("frontend_conf"))
    fs = fc.get("fs", 16000)
    if isinstance(fs, str):
        fs = {"16k": 16000, "8k": 8000}.get(fs.lower(), fs)
    if not isinstance(fs, int):
        raise EspnetImportError(f"{where}: frontend_conf.fs={fs!r} is not supported (an integer rate or 16k/8k)")
    d.sample_rate = fs
    d.n_fft = fc.get("n_fft", 512)
    d.win_length = fc.get("win_length") or d.n_fft
    d.hop_length = fc.get("hop_length", 128)
    d.num_mel_bins = m.input_dim = fc.get("n_mels", 80)
    fc.expect("window", ("hann",), "hann")
    fc.expect("center", (True,), True)
    fc.expect("normalized", (False,), False)
    fc.expect("onesided", (True,), True)
    fc.expect("fmin", (None, 0), None)
    fc.expect("fmax", (None, fs / 2, fs // 2), None)
    fc.expect("htk", (False,), False)
    fc.expect("apply_stft", (True,), True)
    wpe = fc.get("frontend_conf") or {}
    if wpe.get("use_wpe") or wpe.get("use_beamformer"):
        raise EspnetImportError(f"{where}: frontend_conf.frontend_conf={wpe!r} is not supported (no WPE/beamformer)")
    fc.done()

    nc = _Conf(where, "normalize_conf", esp.get("normalize_conf"))
    if esp.get("normalize") == "utterance_mvn":
        m.utterance_cmn = nc.expect("norm_means", (True,), True)
        m.utterance_cvn = bool(nc.get("norm_vars", False))
        nc.ignore("eps")
    elif esp.get("normalize") == "global_mvn":
        nc.expect("norm_means", (True,), True)
        nc.expect("norm_vars", (True,), True)
        nc.ignore("stats_file", "eps")
    nc.done()

    ec = _Conf(where, "encoder_conf", esp.get("encoder_conf"))
    m.d_model = ec.get("output_size", 256)
    m.heads = ec.get("attention_heads", 4)
    m.ffn_dim = ec.get("linear_units", 2048)
    m.encoder_layers = ec.get("num_blocks", 6)
    m.dropout = ec.get("dropout_rate", 0.1)
    m.frontend = INPUT_LAYERS[ec.expect("input_layer", tuple(INPUT_LAYERS), "conv2d")]
    pre = ec.expect("normalize_before", (True, False), True)
    m.norm = "pre" if pre else "post"
    ec.expect("concat_after", (False,), False)
    ec.expect("positionwise_layer_type", ("linear",), "linear")
    ec.expect("pos_enc_layer_type", ("abs_pos",), "abs_pos")
    ec.expect("interctc_layer_idx", ([], None), [])
    ec.expect("interctc_use_conditioning", (False,), False)
    ec.expect("layer_drop_rate", (0.0, 0), 0.0)
    ec.expect("qk_norm", (False,), False)
    ec.ignore("use_flash_attn", "positionwise_conv_kernel_size", "padding_idx", *_TRAINING_DROPOUTS)
    ec.done()

    dc = _Conf(where, "decoder_conf", esp.get("decoder_conf"))
    heads = dc.get("attention_heads", 4)
    ffn = dc.get("linear_units", 2048)
    m.decoder_heads = 0 if heads == m.heads else heads
    m.decoder_ffn_dim = 0 if ffn == m.ffn_dim else ffn
    m.decoder_layers = dc.get("num_blocks", 6)
    dc.expect("input_layer", ("embed",), "embed")
    dc.expect("use_output_layer", (True,), True)
    dc.expect("normalize_before", (pre,), True)
    dc.expect("concat_after", (False,), False)
    dc.expect("layer_drop_rate", (0.0, 0), 0.0)
    dc.expect("qk_norm", (False,), False)
    dc.expect("dropout_rate", (m.dropout,), 0.1)
    dc.ignore("use_flash_attn", *_TRAINING_DROPOUTS)
    dc.done()

    mc = _Conf(where, "model_conf", esp.get("model_conf"))
    m.ctc_weight = mc.get("ctc_weight", 0.5)
    m.label_smoothing = mc.get("lsm_weight", 0.0)
    mc.expect("length_normalized_loss", (False,), False)
    mc.expect("ignore_id", (-1,), -1)
    mc.expect("interctc_weight", (0.0, 0), 0.0)
    mc.expect("sym_blank", ("<blank>",), "<blank>")
    mc.expect("sym_sos", ("<sos/eos>",), "<sos/eos>")
    mc.expect("sym_eos", ("<sos/eos>",), "<sos/eos>")
    mc.ignore("report_cer", "report_wer", "sym_space", "extract_feats_in_collect_stats", "lang_token_id")
    mc.done()

    cc = _Conf(where, "ctc_conf", esp.get("ctc_conf"))
    cc.expect("ctc_type", ("builtin",), "builtin")
    cc.expect("dropout_rate", (0.0, 0), 0.0)
    cc.expect("reduce", (True,), True)
    cc.expect("zero_infinity", (True,), True)
    cc.ignore("ignore_nan_grad", "brctc_risk_strategy", "brctc_group_strategy", "brctc_risk_factor")
    cc.done()
    try:
        return cfg.validate()
    except ValueError as e:
        raise EspnetImportError(f"{where}: {e}") from None
