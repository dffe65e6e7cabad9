"""Configs load, override and fail with errors that name the key or file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from asr.config import Config, ConfigError, load_config, save_config
from asr.model import ASRModel

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_load_and_build(path):
    if "lm" in yaml.safe_load(path.read_text()):  # a language model's (asr lm train)
        from asr.lm import build_lm, load_lm_config

        cfg = load_lm_config(path, ["lm.vocab_size=100"])
        assert sum(p.numel() for p in build_lm(cfg.lm).parameters()) > 0
    else:
        cfg = load_config(path, ["model.vocab_size=100"])
        assert ASRModel(cfg.model).num_parameters() > 0
    assert cfg.train.precision == "auto"  # never one machine's instruction set in a config (asr.hardware)


def test_overrides_and_roundtrip(tmp_path):
    cfg = load_config(None, ["train.lr=0.001", "model.frontend=conv2d", "data.speed_perturb=[0.9, 1.0, 1.1]"])
    assert cfg.train.lr == 0.001 and cfg.model.frontend == "conv2d" and cfg.data.speed_perturb == [0.9, 1.0, 1.1]
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    assert isinstance(cfg, Config)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["model.dmodel=3"], r"model\.dmodel: unknown key"),
        (["model.d_model=abc"], r"model\.d_model: expected an integer"),
        (["model.frontend=lstm"], r"model\.frontend: expected 'linear' or 'conv2d'"),
        (["model.conv_channels=-8"], r"model\.conv_channels: expected an integer >= 0"),
        (["model.conv_stack=0"], r"model\.conv_stack: expected a positive integer"),
        (["model.d_model=100", "model.heads=3"], r"model\.d_model: expected a multiple of heads=3"),
        (["train.lr=-1"], r"train\.lr: expected a positive number"),
        (["data.specaugment.freq_masks=-1"], r"data\.specaugment\.freq_masks"),
        (["data.specaugment.tempo=1.5"], r"data\.specaugment\.tempo: expected a value in \[0, 1\)"),
        (["data.noise.prob=2"], r"data\.noise\.prob: expected a value in \[0, 1\]"),
        (["nosection.x=1"], r"nosection: unknown key"),
        (["train.lr"], r"expected KEY=VALUE"),
        (["data.cache_features=true", "data.num_workers=2"], r"data\.num_workers: expected 0 when cache_features"),
        (["data.cache_features=true", "data.num_workers=0", "data.dither=1"], r"data\.dither: expected 0 when"),
    ],
)
def test_bad_values_name_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_broken_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(bad)
    bad.write_text("model:\n  heads: 4.5\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: model\.heads: expected an integer"):
        load_config(bad)
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.yaml")


def test_length_penalty_is_read_as_length_bonus_with_a_warning(tmp_path, caplog):
    """Model directories written before the rename keep loading; the old name is a warning."""
    p = tmp_path / "old.yaml"
    p.write_text("decode:\n  length_penalty: 0.5\n")
    with caplog.at_level("WARNING", logger="asr.config"):
        assert load_config(p).decode.length_bonus == 0.5
    assert "decode.length_penalty is the old name of decode.length_bonus" in caplog.text
    p.write_text("decode:\n  length_penalty: 0.5\n  length_bonus: 1.0\n")
    with pytest.raises(ConfigError, match="decode.length_penalty: the old name of decode.length_bonus"):
        load_config(p)
    assert load_config(None).decode.updated(length_bonus=None, beam_size=3).beam_size == 3
