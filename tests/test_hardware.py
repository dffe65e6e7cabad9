"""Precision follows the hardware (capability queries mocked), and the speed paths are chosen in one place."""

import logging
import os
import subprocess
import sys

import pytest
import torch

from asr import hardware, speed
from asr.config import ConfigError, DecodeConfig

INTEL_AMX = dict(model="Intel Xeon", vendor="GenuineIntel", capability="AVX512", avx512=True, avx512_bf16=True,
                 amx=True, onednn_bf16=True, onednn_max_isa="", threads=2)  # fmt: skip
AMD_AVX512_BF16 = {**INTEL_AMX, "vendor": "AuthenticAMD", "amx": False}
AVX2_ONLY = dict(model="AMD EPYC", vendor="AuthenticAMD", capability="AVX2", avx512=False, avx512_bf16=False,
                 amx=False, onednn_bf16=False, onednn_max_isa="", threads=2)  # fmt: skip


@pytest.fixture
def cpu(monkeypatch):
    """Make asr.hardware see the CPU described by the keyword arguments."""

    def use(**facts):
        info = hardware.CpuInfo(**facts)
        monkeypatch.setattr(hardware, "cpu_info", lambda: info)
        monkeypatch.setattr(hardware, "_warned", set())
        return info

    return use


@pytest.fixture
def cuda(monkeypatch):
    def use(bf16: bool):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)

    return use


def test_cuda_auto_is_bf16_where_supported_else_fp16(cuda):
    cuda(True)
    assert hardware.resolve_precision("auto", "cuda") == "bf16"
    cuda(False)
    assert hardware.resolve_precision("auto", "cuda") == "fp16"
    assert hardware.resolve_precision("fp32", "cuda") == "fp32"


@pytest.mark.parametrize("facts", [INTEL_AMX, AMD_AVX512_BF16], ids=["amx", "avx512-bf16"])
def test_cpu_auto_is_bf16_with_native_bf16(cpu, facts, caplog):
    cpu(**facts)
    with caplog.at_level(logging.INFO, logger="asr.hardware"):
        assert hardware.resolve_precision("auto", "cpu") == "bf16"
    assert "train.precision auto -> bf16" in caplog.text and "native bf16" in caplog.text


def test_cpu_auto_is_fp32_on_avx2_only(cpu, caplog):
    cpu(**AVX2_ONLY)
    with caplog.at_level(logging.INFO, logger="asr.hardware"):
        assert hardware.resolve_precision("auto", "cpu") == "fp32"
    assert "auto -> fp32" in caplog.text and "no native bf16" in caplog.text


def test_cpu_with_bf16_instructions_that_onednn_may_not_use_is_not_native(cpu):
    assert not cpu(**{**INTEL_AMX, "onednn_bf16": False}).native_bf16  # oneDNN limited below AVX-512
    assert not cpu(**{**INTEL_AMX, "onednn_max_isa": "AVX512_CORE"}).native_bf16  # AVX-512 without bf16
    assert hardware.resolve_precision("auto", "cpu") == "fp32"
    assert cpu(**{**INTEL_AMX, "onednn_max_isa": "avx512_core_amx"}).native_bf16


def test_explicit_bf16_without_native_bf16_runs_but_warns_once(cpu, caplog):
    cpu(**AVX2_ONLY)
    with caplog.at_level(logging.WARNING, logger="asr.hardware"):
        assert hardware.resolve_precision("bf16", "cpu") == "bf16"
        assert hardware.resolve_precision("bf16", "cpu") == "bf16"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "many times slower" in warnings[0].getMessage()
    assert "train.precision" in warnings[0].getMessage()


def test_explicit_bf16_with_native_bf16_does_not_warn(cpu, caplog):
    cpu(**INTEL_AMX)
    with caplog.at_level(logging.WARNING, logger="asr.hardware"):
        assert hardware.resolve_precision("bf16", "cpu") == "bf16"
    assert not caplog.records


def test_fp16_on_cpu_and_unknown_precision_are_errors_naming_the_key(cpu):
    cpu(**AVX2_ONLY)
    with pytest.raises(ConfigError, match="decode.precision: fp16 needs a CUDA GPU"):
        hardware.resolve_precision("fp16", "cpu", "decode.precision")
    with pytest.raises(ConfigError, match="train.precision: expected one of"):
        hardware.resolve_precision("half", "cpu")
    with pytest.raises(ConfigError, match="decode.precision"):
        DecodeConfig(precision="half").validate()


def test_decoding_follows_the_same_rule(cpu, caplog):
    """recognize() resolves decode.precision like training: auto is fp32 on an AVX2-only CPU, and an
    explicit bf16 there warns (and still decodes)."""
    from asr.config import ModelConfig
    from asr.decode import recognize
    from asr.model import ASRModel

    cpu(**AVX2_ONLY)
    torch.manual_seed(0)
    model = ASRModel(ModelConfig(input_dim=8, d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1,
                                 vocab_size=6, stack=2)).eval()  # fmt: skip
    feats, lens = torch.randn(2, 20, 8), torch.tensor([20, 14])
    fp32 = recognize(model, feats, lens, DecodeConfig(mode="ctc_greedy", precision="fp32"))
    with caplog.at_level(logging.INFO, logger="asr.hardware"):
        auto = recognize(model, feats, lens, DecodeConfig(mode="ctc_greedy", precision="auto"))
        recognize(model, feats, lens, DecodeConfig(mode="ctc_greedy", precision="bf16"))
    assert [h.tokens for h in auto] == [h.tokens for h in fp32] and [h.score for h in auto] == [h.score for h in fp32]
    assert "decode.precision auto -> fp32" in caplog.text
    assert "decode.precision: bf16 on a CPU without native bf16" in caplog.text


def test_cpu_info_answers_from_this_machine():
    info = hardware.cpu_info()
    assert info.capability in ("DEFAULT", "AVX2", "AVX512", "AVX512_BF16", "ZVECTOR", "NEON", "SVE256", "VSX")
    assert info.native_bf16 == ((info.amx or info.avx512_bf16) and info.onednn_bf16 and info.onednn_max_isa == "")
    assert "native bf16" in info.summary() and set(info.to_dict()) >= {"model", "capability", "native_bf16"}


def test_speed_paths_follow_the_cpu():
    intel, amd = hardware.CpuInfo(**INTEL_AMX), hardware.CpuInfo(**AMD_AVX512_BF16)
    avx2_amd = hardware.CpuInfo(**AVX2_ONLY)
    limited_amd = hardware.CpuInfo(**{**AMD_AVX512_BF16, "onednn_max_isa": "AVX2"})
    assert speed.defaults(amd)["onednn_linear"]  # MKL's generic path on AMD: oneDNN faster
    for info in (intel, avx2_amd, limited_amd):
        assert not speed.defaults(info)["onednn_linear"]  # MKL was faster there in training
        assert all(speed.defaults(info)[p] for p in ("conv_channels_last", "cheap_dropout", "fbank_batch"))
    for info in (amd, avx2_amd, limited_amd):
        assert speed.defaults(info)["onednn_inference"]  # decoding: oneDNN faster on AMD at either ISA
    assert not speed.defaults(intel)["onednn_inference"]  # MKL was faster on Intel
    limited_intel = hardware.CpuInfo(**{**INTEL_AMX, "onednn_max_isa": "AVX2", "capability": "AVX2"})
    for info in (intel, amd, avx2_amd, limited_amd):
        assert speed.defaults(info)["conv_patch_gemm"]  # the frontend's convolutions in chunks: faster on both
    for info in (limited_intel, avx2_amd, limited_amd):
        assert speed.defaults(info)["conv_patch_train"]  # training's in chunks: faster at AVX2 only, on both
    assert not any(speed.defaults(info)["conv_patch_train"] for info in (intel, amd))


def test_speed_paths_can_be_overridden(monkeypatch):
    with speed.override(cheap_dropout=False):
        assert not speed.enabled("cheap_dropout")
        with speed.override(cheap_dropout=True):
            assert speed.enabled("cheap_dropout")
        assert not speed.enabled("cheap_dropout")
    with pytest.raises(ValueError, match="unknown speed path"):
        with speed.override(warp_drive=True):
            pass
    monkeypatch.setenv("ASR_SPEED_PATHS", "fbank_batch=0, onednn_linear=1")
    monkeypatch.setenv("ASR_ONEDNN_LINEAR", "1")
    assert speed._from_env() == {"fbank_batch": False, "onednn_linear": True}
    monkeypatch.setenv("ASR_SPEED_PATHS", "fbank_batch=yes")
    with pytest.raises(ValueError, match="ASR_SPEED_PATHS"):
        speed._from_env()
    monkeypatch.setenv("ASR_SPEED_PATHS", "")
    monkeypatch.setenv("ASR_ONEDNN_LINEAR", "0")
    assert speed._from_env() == {"onednn_linear": False, "onednn_inference": False}


def test_plain_paths_compute_the_same_model():
    """With every speed path off the model is plain PyTorch; in eval mode (no dropout) it gives the
    same outputs as with every path on, to float32 rounding."""
    from asr.config import ModelConfig
    from asr.model import ASRModel

    torch.manual_seed(0)
    cfg = ModelConfig(input_dim=40, d_model=64, heads=4, ffn_dim=128, encoder_layers=2, decoder_layers=1,
                      vocab_size=12, frontend="conv2d", conv_channels=32, conv_stack=2)  # fmt: skip
    model = ASRModel(cfg).eval()
    feats, lens = torch.randn(3, 120, 40), torch.tensor([120, 90, 60])
    toks, tok_lens = torch.randint(2, 11, (3, 4)), torch.tensor([4, 3, 2])
    outs = []
    for on in (True, False):
        with speed.override(**dict.fromkeys(speed.PATHS, on)):
            outs.append(model(feats, lens, toks, tok_lens)["loss"])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


_FAULTS = """
import resource, sys, torch
from asr import speed
print(speed.configure_process()["heap_reuse"])
faults = []
for _ in range(30):  # a 64 MB block, filled and freed, as a training step's activations are
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(2**24)
    del x
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(sum(faults[20:]))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="heap_reuse is a glibc setting")
def test_heap_reuse_keeps_big_blocks_for_the_next_step():
    """With heap_reuse (on by default) a big block freed and asked for again comes back without the
    kernel faulting its pages in again, once the heap has grown (here after about ten rounds: each
    64-byte-aligned request is a little larger than the block it freed, until freed neighbours
    merge); ASR_SPEED_PATHS turns it off."""
    run = [sys.executable, "-c", _FAULTS]
    on = subprocess.run(run, capture_output=True, text=True, check=True, env={**os.environ, "ASR_SPEED_PATHS": ""})
    applied, faults = on.stdout.split()
    assert applied == "True"
    assert int(faults) < 16  # through mmap each block would fault 16384 pages (32 with 2 MB pages)
    off = subprocess.run(run, capture_output=True, text=True, check=True,
                         env={**os.environ, "ASR_SPEED_PATHS": "heap_reuse=0"})  # fmt: skip
    assert off.stdout.split()[0] == "False"
