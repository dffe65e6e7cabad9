"""Experiment configuration: four dataclasses (model, data, train, decode), YAML in and out.

Every key is checked when a file is loaded: an unknown key, a wrong type or an out-of-range value
raises :class:`ConfigError` naming the key (``model.d_model``) and what was expected.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from asr.config_io import ConfigError, apply_overrides, build_config, read_config_file, save_config

__all__ = [
    "ConfigError",
    "ModelConfig",
    "DataConfig",
    "SpecAugmentConfig",
    "NoiseConfig",
    "TrainConfig",
    "DecodeConfig",
    "Config",
    "load_config",
    "save_config",
    "apply_overrides",
]


PRECISIONS = ("auto", "bf16", "fp16", "fp32")  # train.precision and decode.precision (asr.hardware resolves auto)


@dataclass
class ModelConfig:
    """Dimensions and losses of the encoder-decoder (the 100 h LibriSpeech size by default)."""

    input_dim: int = 80  # fbank bins
    d_model: int = 256
    heads: int = 4
    ffn_dim: int = 2048
    encoder_layers: int = 12
    decoder_layers: int = 6
    dropout: float = 0.1
    frontend: str = "linear"  # "linear" (stack frames + Linear), "conv2d" (two stride-2 3x3 convs), and ESPnet's
    # input layers: "linear_norm" (Linear, LayerNorm, dropout, ReLU), "conv2d6" (3x3/2 then 5x5/3), "conv2d8" (three
    # 3x3/2; not the same as conv2d with conv_stack 2, which also subsamples 8x)
    stack: int = 4  # frames stacked by the linear frontend (its subsampling factor)
    conv_channels: int = 0  # channels of the conv2d frontend's convolutions; 0: d_model (ESPnet, WeNet)
    conv_stack: int = 1  # conv2d output frames stacked before its Linear: 2 gives 8x subsampling (80 ms frames)
    utterance_cmn: bool = False  # after global CMVN, subtract each utterance's own mean (gain/channel invariance)
    norm: str = "pre"  # "pre" (LayerNorm before each block) or "post" (the original Transformer)
    vocab_size: int = 0  # 0: taken from the tokenizer at training start
    ctc_weight: float = 0.3
    label_smoothing: float = 0.1
    # What ESPnet's Transformer does differently (asr.importers.espnet sets these; the defaults are ours):
    utterance_cvn: bool = False  # with utterance_cmn: also divide by each utterance's standard deviation
    decoder_heads: int = 0  # 0: heads
    decoder_ffn_dim: int = 0  # 0: ffn_dim
    layer_norm_eps: float = 1e-5  # ESPnet's Transformer LayerNorms: 1e-12
    tie_output: bool = True  # decoder output layer = token embedding (no bias); false: its own Linear with bias
    label_smoothing_mode: str = "uniform"  # "uniform": PyTorch's (eps / V on every class); "espnet": eps / (V - 1)
    # on every class but the target, loss as KL divergence (ESPnet's LabelSmoothingLoss)
    padding: str = "exact"  # "exact": an encoder frame never reads padding; "espnet": ESPnet's lengths after
    # subsampling (ceil per stride) and zeroed padded features, so a batch gives what ESPnet gives
    # What Whisper does differently (asr.importers.whisper sets these; docs/whisper.md):
    activation: str = "relu"  # the FFN's: "relu", or "gelu" (exact, erf)
    positions: str = "sinusoidal"  # "sinusoidal": x * sqrt(d_model) + sin/cos interleaved (ours, ESPnet's);
    # "whisper": the encoder adds Whisper's sinusoids (sin half, cos half) and the decoder a learned table, unscaled
    max_source_len: int = 1500  # positions "whisper": encoder frames of the position table (30 s)
    max_target_len: int = 448  # positions "whisper": decoder positions (prompt and output together)
    ctc_head: bool = True  # false: no CTC head (an imported Whisper model; ctc_weight must be 0)
    sos_id: int = -1  # the decoder's start token; -1: vocab_size - 1 (ours and ESPnet's <sos/eos>)
    eos_id: int = -1  # its end token; -1: vocab_size - 1
    blank_id: int = 0  # the CTC blank (ours and ESPnet's: 0; a Whisper model's CTC head: <|nospeech|>)
    ctc_blank_bias: float = 0.0  # a fresh CTC head's initial bias for blank (the other biases keep Linear's init):
    # over a large vocabulary (Whisper's 51,864) a head starting near uniform puts most of its mass off blank
    prompt: list[int] = field(default_factory=list)  # tokens the decoder reads before a transcript in training
    # (Whisper's start of transcript, language, task, no-timestamps); empty: sos alone

    FRONTENDS = ("linear", "conv2d", "linear_norm", "conv2d6", "conv2d8", "conv1d")

    def validate(self, prefix: str = "model") -> None:
        fronts = " or ".join(map(repr, self.FRONTENDS))
        _check(self.frontend in self.FRONTENDS, prefix, "frontend", fronts, self.frontend)
        _check(self.norm in ("pre", "post"), prefix, "norm", "'pre' or 'post'", self.norm)
        modes = ("uniform", "espnet")
        _check(self.label_smoothing_mode in modes, prefix, "label_smoothing_mode", "'uniform' or 'espnet'",
               self.label_smoothing_mode)
        _check(self.padding in ("exact", "espnet"), prefix, "padding", "'exact' or 'espnet'", self.padding)
        _check(self.activation in ("relu", "gelu"), prefix, "activation", "'relu' or 'gelu'", self.activation)
        _check(self.positions in ("sinusoidal", "whisper"), prefix, "positions", "'sinusoidal' or 'whisper'",
               self.positions)
        for k in ("max_source_len", "max_target_len"):
            _check(getattr(self, k) >= 1, prefix, k, "a positive integer", getattr(self, k))
        _check(self.ctc_head or self.ctc_weight == 0, prefix, "ctc_weight", "0 without a CTC head (ctc_head false)",
               self.ctc_weight)
        _check(0 <= self.blank_id and (self.vocab_size == 0 or self.blank_id < self.vocab_size), prefix, "blank_id",
               f"an id below vocab_size={self.vocab_size}", self.blank_id)
        for k in ("sos_id", "eos_id"):
            v = getattr(self, k)
            _check(v >= -1 and (self.vocab_size == 0 or v < self.vocab_size), prefix, k,
                   f"-1 (vocab_size - 1) or an id below vocab_size={self.vocab_size}", v)
        if self.padding == "espnet":
            _check(self.conv_stack == 1, prefix, "conv_stack", "1 with padding 'espnet'", self.conv_stack)
        _check(0 < self.layer_norm_eps < 1, prefix, "layer_norm_eps", "a value in (0, 1)", self.layer_norm_eps)
        _check(not self.utterance_cvn or self.utterance_cmn, prefix, "utterance_cvn", "false unless utterance_cmn",
               self.utterance_cvn)
        for k in ("decoder_heads", "decoder_ffn_dim"):
            _check(getattr(self, k) >= 0, prefix, k, "an integer >= 0 (0: as the encoder)", getattr(self, k))
        if self.decoder_heads:
            _check(self.d_model % self.decoder_heads == 0, prefix, "d_model",
                   f"a multiple of decoder_heads={self.decoder_heads}", self.d_model)
        for k in ("input_dim", "d_model", "heads", "ffn_dim", "stack", "conv_stack"):
            _check(getattr(self, k) >= 1, prefix, k, "a positive integer", getattr(self, k))
        for k in ("encoder_layers", "decoder_layers", "vocab_size", "conv_channels"):
            _check(getattr(self, k) >= 0, prefix, k, "an integer >= 0", getattr(self, k))
        _check(self.d_model % self.heads == 0, prefix, "d_model", f"a multiple of heads={self.heads}", self.d_model)
        _check(0.0 <= self.dropout < 1.0, prefix, "dropout", "a value in [0, 1)", self.dropout)
        _check(0.0 <= self.ctc_weight <= 1.0, prefix, "ctc_weight", "a value in [0, 1]", self.ctc_weight)
        _check(0.0 <= self.label_smoothing < 1.0, prefix, "label_smoothing", "a value in [0, 1)", self.label_smoothing)
        if self.ctc_weight < 1.0:
            _check(self.decoder_layers >= 1, prefix, "decoder_layers", ">= 1 unless ctc_weight is 1", 0)


@dataclass
class SpecAugmentConfig:
    """SpecAugment (Park et al. 2019) on the batch, training only. Widths are maximum widths."""

    freq_masks: int = 2
    freq_width: int = 27
    time_masks: int = 2
    time_width: float = 0.05  # < 1: share of the utterance's frames; >= 1: frames
    time_warp: int = 0  # maximum warp in frames; 0 disables it
    freq_warp: float = 0.0  # VTLP: formants moved by up to this share (0.1: x0.9-1.1); 0 disables it
    tempo: float = 0.0  # local tempo: each piece played at a rate in [1/(1+w), 1+w] (lengths change); 0: off
    tempo_span: int = 40  # frames per tempo piece

    def validate(self, prefix: str = "data.specaugment") -> None:
        for k in ("freq_masks", "freq_width", "time_masks", "time_warp"):
            _check(getattr(self, k) >= 0, prefix, k, "an integer >= 0", getattr(self, k))
        _check(0 <= self.tempo < 1, prefix, "tempo", "a value in [0, 1)", self.tempo)
        _check(self.tempo_span >= 1, prefix, "tempo_span", "a positive integer", self.tempo_span)
        _check(self.time_width >= 0, prefix, "time_width", "a value >= 0", self.time_width)
        _check(0 <= self.freq_warp < 0.5, prefix, "freq_warp", "a value in [0, 0.5)", self.freq_warp)


@dataclass
class NoiseConfig:
    """Synthetic stationary background noise added to the fbank (power domain), training only."""

    prob: float = 0.0  # share of utterances that get noise; 0: off
    snr_min: float = 5.0  # dB against the utterance's mean power
    snr_max: float = 30.0
    tilt_db: float = 20.0  # colour: the spectrum slopes by U[-tilt_db, tilt_db] dB from lowest to highest band
    peak_db: float = 20.0  # plus one narrow band (hum, whine) raised by U[0, peak_db] dB at a random place

    def validate(self, prefix: str = "data.noise") -> None:
        _check(0.0 <= self.prob <= 1.0, prefix, "prob", "a value in [0, 1]", self.prob)
        _check(self.snr_min <= self.snr_max, prefix, "snr_max", f">= snr_min={self.snr_min}", self.snr_max)
        for k in ("tilt_db", "peak_db"):
            _check(getattr(self, k) >= 0, prefix, k, "a value >= 0", getattr(self, k))


@dataclass
class DataConfig:
    """Where the data is and how it becomes batches."""

    train: str = ""  # manifest (JSON Lines)
    dev: str = ""
    tokenizer: str = ""  # tokenizer directory (SentencePiece model)
    cmvn: str = ""  # global CMVN statistics (JSON); empty: computed from the training manifest
    normalizer: str = "librispeech"  # text normalisation, see asr.text
    sample_rate: int = 16000
    num_mel_bins: int = 80
    features: str = "kaldi"  # "kaldi" (Kaldi fbank, 25/10 ms), "espnet" (ESPnet's default frontend: STFT power
    # spectrum, librosa's Slaney mel filterbank, natural log; asr.features.espnet) or "whisper" (Whisper's log-mel:
    # the same filterbank on a 400-point STFT, log10, floored 8 below the utterance's maximum, (x + 4) / 4)
    pad_to: float = 0.0  # seconds: audio padded with zeros or cut to this length before the features (Whisper's
    # encoder reads 30 s windows: 30); 0: each utterance as long as it is
    n_fft: int = 512  # features "espnet" only: FFT size, window and hop in samples
    win_length: int = 400
    hop_length: int = 160
    dither: float = 0.0  # Kaldi dither during training (0 = off)
    max_frames: int = 20000  # fbank frames (10 ms) per batch, padding included
    max_utterances: int = 64
    max_duration: float = 30.0  # seconds; longer utterances are dropped at load (counted)
    num_buckets: int = 30
    speed_perturb: list[float] = field(default_factory=list)  # e.g. [0.9, 1.0, 1.1]; empty: off
    specaugment: SpecAugmentConfig | None = field(default_factory=SpecAugmentConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    num_workers: int = 2
    cache_features: bool = False  # keep each utterance's fbank (per speed factor) in memory: small corpora
    max_skip_ratio: float = 0.01  # an epoch fails when more than this share of files is unreadable

    def validate(self, prefix: str = "data") -> None:
        _check(self.sample_rate > 0, prefix, "sample_rate", "a positive integer", self.sample_rate)
        _check(self.num_mel_bins > 0, prefix, "num_mel_bins", "a positive integer", self.num_mel_bins)
        feats = ("kaldi", "espnet", "whisper")
        _check(self.features in feats, prefix, "features", " or ".join(map(repr, feats)), self.features)
        _check(self.pad_to >= 0, prefix, "pad_to", "seconds >= 0 (0: no padding)", self.pad_to)
        if self.features == "whisper":
            _check(self.sample_rate == 16000, prefix, "sample_rate", "16000 with features 'whisper'", self.sample_rate)
        for k in ("n_fft", "win_length", "hop_length"):
            _check(getattr(self, k) > 0, prefix, k, "a positive integer", getattr(self, k))
        _check(self.win_length <= self.n_fft, prefix, "win_length", f"<= n_fft={self.n_fft}", self.win_length)
        if self.features != "kaldi":
            _check(self.dither == 0, prefix, "dither", f"0 with features {self.features!r} (only Kaldi's has dither)",
                   self.dither)
        _check(self.max_frames > 0, prefix, "max_frames", "a positive integer", self.max_frames)
        _check(self.max_utterances > 0, prefix, "max_utterances", "a positive integer", self.max_utterances)
        _check(self.max_duration > 0, prefix, "max_duration", "a positive number", self.max_duration)
        _check(self.num_buckets > 0, prefix, "num_buckets", "a positive integer", self.num_buckets)
        _check(self.num_workers >= 0, prefix, "num_workers", "an integer >= 0", self.num_workers)
        if self.cache_features:  # a worker's cache would die with the worker at the end of each epoch
            _check(self.num_workers == 0, prefix, "num_workers", "0 when cache_features is true", self.num_workers)
            _check(self.dither == 0, prefix, "dither", "0 when cache_features is true (dither differs each epoch)",
                   self.dither)
        _check(all(f > 0 for f in self.speed_perturb), prefix, "speed_perturb", "positive factors", self.speed_perturb)
        _check(0.0 <= self.max_skip_ratio <= 1.0, prefix, "max_skip_ratio", "a value in [0, 1]", self.max_skip_ratio)
        if self.specaugment is not None:
            self.specaugment.validate(f"{prefix}.specaugment")
        self.noise.validate(f"{prefix}.noise")


@dataclass
class TrainConfig:
    """Optimisation, precision, checkpoints and logging."""

    seed: int = 42
    epochs: int = 100
    max_steps: int = 0  # optimiser steps; 0: no limit beyond epochs
    optimizer: str = "adamw"  # "adam" or "adamw"
    lr: float = 0.002  # peak learning rate
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-9
    weight_decay: float = 0.0
    scheduler: str = "noam"  # "noam" (inverse square root after linear warmup), "cosine", "constant"
    warmup_steps: int = 25000
    min_lr: float = 0.0  # floor of the cosine schedule
    grad_clip: float = 5.0  # max gradient norm; 0 disables clipping
    accum_grad: int = 1
    precision: str = "auto"  # "auto", "bf16", "fp16", "fp32"; auto: bf16 on GPUs that have it (else fp16), and on
    # CPUs with native bf16 arithmetic (AMX, AVX512-BF16), else fp32 (asr.hardware.resolve_precision)
    log_interval: int = 100  # steps between JSON Lines log records
    checkpoint_interval: int = 1000  # steps between mid-epoch checkpoints; 0: only at epoch ends
    keep_last: int = 5  # step/epoch checkpoints kept on disk
    keep_best: int = 10  # best epoch checkpoints remembered (and kept) by best_metric
    best_metric: str = "dev_loss"  # "dev_loss", "dev_acc" or "dev_wer"
    max_bad_steps: int = 5  # consecutive non-finite losses before the run aborts
    dev_wer: bool = True  # greedy WER on the dev set at each epoch end
    init: str = ""  # start from these weights (a model directory or a checkpoint .pt) instead of random ones:
    # fine-tuning. Only a fresh run reads it (a resumed one continues its own checkpoint); its CMVN comes too
    # unless data.cmvn says otherwise. Tensors the config adds (a CTC head) start fresh and are named in the log
    freeze: list[str] = field(default_factory=list)  # parameter name prefixes kept fixed ("encoder.", "frontend.")
    lr_scales: list[str] = field(default_factory=list)  # "PREFIX=F": parameters under PREFIX learn at F x lr (a fresh
    # CTC head on a pretrained model: "ctc.=30")

    def validate(self, prefix: str = "train") -> None:
        _check(self.optimizer in ("adam", "adamw"), prefix, "optimizer", "'adam' or 'adamw'", self.optimizer)
        sched = ("noam", "cosine", "constant")
        _check(self.scheduler in sched, prefix, "scheduler", " or ".join(map(repr, sched)), self.scheduler)
        _check(self.precision in PRECISIONS, prefix, "precision", " or ".join(map(repr, PRECISIONS)), self.precision)
        metrics = ("dev_loss", "dev_acc", "dev_wer")
        _check(self.best_metric in metrics, prefix, "best_metric", " or ".join(map(repr, metrics)), self.best_metric)
        _check(self.lr > 0, prefix, "lr", "a positive number", self.lr)
        _check(len(self.betas) == 2, prefix, "betas", "two numbers", self.betas)
        for k in ("epochs", "accum_grad", "log_interval", "keep_last", "max_bad_steps"):
            _check(getattr(self, k) >= 1, prefix, k, "a positive integer", getattr(self, k))
        for k in ("max_steps", "warmup_steps", "checkpoint_interval", "keep_best"):
            _check(getattr(self, k) >= 0, prefix, k, "an integer >= 0", getattr(self, k))
        _check(self.grad_clip >= 0, prefix, "grad_clip", "a value >= 0", self.grad_clip)
        for item in self.lr_scales:
            name, _, factor = str(item).partition("=")
            try:
                ok = bool(name) and float(factor) > 0
            except ValueError:
                ok = False
            _check(ok, prefix, "lr_scales", "entries 'PREFIX=FACTOR' with FACTOR > 0, e.g. 'ctc.=30'", item)


@dataclass
class DecodeConfig:
    """Search settings used by ``asr decode`` / ``asr transcribe`` unless the command line overrides them."""

    mode: str = "attention"  # "attention" (beam/greedy with optional CTC), "ctc_greedy", "ctc_beam", "rescore"
    beam_size: int = 10
    ctc_weight: float = 0.3
    length_bonus: float = 0.0  # added to a hypothesis' score per emitted token (old name: length_penalty)
    length_norm: bool = False  # rank finished hypotheses by score / length
    max_len_ratio: float = 1.0  # maximum output tokens = ratio * encoder frames (0 with rules espnet: end detection)
    rules: str = "asr"  # the search's rules (asr.decode.rules): "asr", "espnet" as ESPnet's Speech2Text decodes, or
    # "whisper" as openai-whisper's decode does (set by asr import whisper)
    language: str = ""  # rules whisper, multilingual models: the spoken language ("en", "de", ...); empty: detected
    task: str = "transcribe"  # rules whisper, multilingual models: "transcribe" or "translate" (into English)
    timestamps: bool = False  # rules whisper: predict segment times (Whisper's timestamp tokens and their rules)
    patience: float = 1.0  # rules whisper: the search ends when round(beam_size * patience) hypotheses have ended
    max_frames: int = 30000  # fbank frames per decoding batch
    precision: str = "fp32"  # "fp32", "auto", "bf16", "fp16": as train.precision (auto: bf16 only where native)
    lm: str = ""  # LM directory fused by default (asr decode/transcribe --lm override it); relative: to the model dir
    lm_weight: float = 0.0  # shallow fusion: + lm_weight * log p_lm per token; 0: no LM
    quantize_lm: bool = False  # the LM's matrix products in int8 (asr.lm.quantize): faster fusion, not ESPnet-equal
    speed: float = 1.0  # play the audio this many times faster before the features (resampled, pitch too, as
    # training's speed perturbation); 1.0: as recorded
    speeds: list[float] = field(default_factory=list)  # a test-time ensemble: the audio played at each speed,
    # the n-best of every one pooled and rescored in all (asr.decode.speeds); empty: one decoding at `speed`

    ALIASES = {"length_penalty": "length_bonus"}  # old key -> new key: still read, with a warning

    def updated(self, **overrides: Any) -> DecodeConfig:
        """A validated copy with the given settings changed (``None`` values leave a setting as it is).
        Leaving rules ``espnet`` for ``asr`` turns ESPnet's ``max_len_ratio`` 0 into asr's 1.0 (every
        encoder frame either way) unless ``max_len_ratio`` is given too."""
        over = {k: v for k, v in overrides.items() if v is not None}
        if over.get("rules") == "asr" and "max_len_ratio" not in over and self.max_len_ratio == 0:
            over["max_len_ratio"] = 1.0
        cfg = dataclasses.replace(self, **over)
        cfg.validate()
        return cfg

    def validate(self, prefix: str = "decode") -> None:
        _check(self.precision in PRECISIONS, prefix, "precision", " or ".join(map(repr, PRECISIONS)), self.precision)
        modes = ("attention", "ctc_greedy", "ctc_beam", "rescore")
        _check(self.mode in modes, prefix, "mode", " or ".join(map(repr, modes)), self.mode)
        _check(self.beam_size >= 1, prefix, "beam_size", "a positive integer", self.beam_size)
        _check(self.speed > 0, prefix, "speed", "a positive number", self.speed)
        _check(all(isinstance(x, (int, float)) and x > 0 for x in self.speeds) and len(self.speeds) != 1, prefix,
               "speeds", "two or more positive numbers, or none (one speed: decode.speed)", self.speeds)
        _check(not self.speeds or self.speed == 1.0, prefix, "speed",
               f"1.0 beside {prefix}.speeds (give one of the two)", self.speed)
        _check(0.0 <= self.ctc_weight <= 1.0, prefix, "ctc_weight", "a value in [0, 1]", self.ctc_weight)
        _check(self.rules in ("asr", "espnet", "whisper"), prefix, "rules", "'asr', 'espnet' or 'whisper'", self.rules)
        _check(self.task in ("transcribe", "translate"), prefix, "task", "'transcribe' or 'translate'", self.task)
        _check(self.patience > 0, prefix, "patience", "a positive number", self.patience)
        _check(self.max_len_ratio > 0 or (self.max_len_ratio == 0 and self.rules == "espnet"), prefix,
               "max_len_ratio", "a positive number (0 only with rules espnet)", self.max_len_ratio)  # fmt: skip
        _check(self.max_frames > 0, prefix, "max_frames", "a positive integer", self.max_frames)
        _check(self.lm_weight >= 0, prefix, "lm_weight", "a value >= 0", self.lm_weight)


@dataclass
class Config:
    """One experiment: everything ``asr train`` needs, saved beside the checkpoints."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def validate(self) -> Config:
        self.model.validate()
        self.data.validate()
        self.train.validate()
        self.decode.validate()
        if self.data.num_mel_bins != self.model.input_dim:
            raise ConfigError(
                f"model.input_dim: expected data.num_mel_bins={self.data.num_mel_bins}, got {self.model.input_dim}"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check(ok: bool, prefix: str, key: str, expected: str, got: Any) -> None:
    if not ok:
        raise ConfigError(f"{prefix}.{key}: expected {expected}, got {got!r}")


def load_config(
    path: str | os.PathLike | list[str | os.PathLike] | None = None, overrides: list[str] | None = None
) -> Config:
    """Read a YAML experiment file (missing sections take defaults), apply ``--set`` overrides, validate.

    Several files are read in order, each key of a later one replacing the earlier's (a model
    directory's config.yaml, then a fine-tuning recipe's data and train sections)."""
    paths = list(path) if isinstance(path, (list, tuple)) else ([] if path is None else [path])
    data: dict[str, Any] = {}
    for p in paths:
        for section, values in read_config_file(p, "model/data/train/decode").items():
            if isinstance(values, dict) and isinstance(data.get(section), dict):
                _merge(data[section], values)
            else:
                data[section] = values
    apply_overrides(data, overrides or [])
    return build_config(Config, data, " + ".join(map(str, paths)) or None)


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v
