"""asr train: schedules, faults, DDP equivalence, kill-and-resume, SIGTERM, memorisation on real speech.

The runs use the shortest LibriSpeech utterances of ../shared/data, a char tokenizer and a tiny
model, so each takes seconds; the memorisation run is marked slow (about a minute of CPU).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from asr import speed
from asr.checkpoint import safe_load
from asr.config import ConfigError, TrainConfig, load_config
from asr.inference import load_model
from asr.training.checkpoints import list_checkpoints
from asr.training.optim import lr_factor
from asr.training.train import LOG_FILE, TrainingAborted, train
from asr.training.validate import word_errors

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = {"d_model": 96, "heads": 4, "ffn_dim": 384, "encoder_layers": 3, "decoder_layers": 2}


# ----------------------------------------------------------------------------- unit
def test_noam_matches_espnet_warmuplr():
    cfg = TrainConfig(scheduler="noam", warmup_steps=100, lr=1.0)
    for step in (0, 10, 99, 100, 500, 5000):
        s = step + 1  # ESPnet: lr * warmup**0.5 * min(s**-0.5, s * warmup**-1.5)
        assert lr_factor(step, cfg, 0) == pytest.approx(100**0.5 * min(s**-0.5, s * 100**-1.5))
    assert lr_factor(99, cfg, 0) == pytest.approx(1.0)  # peak = train.lr at warmup_steps


def test_cosine_and_constant():
    cfg = TrainConfig(scheduler="cosine", warmup_steps=10, lr=1e-3, min_lr=1e-4)
    assert lr_factor(4, cfg, 110) == pytest.approx(0.5)
    assert lr_factor(9, cfg, 110) == pytest.approx(1.0)
    assert lr_factor(59, cfg, 110) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor(109, cfg, 110) == pytest.approx(0.1)
    assert lr_factor(500, cfg, 110) == pytest.approx(0.1)
    const = TrainConfig(scheduler="constant", warmup_steps=4)
    assert [lr_factor(s, const, 0) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_word_errors():
    assert word_errors("A B C D", "A X C") == (2, 4)
    assert word_errors("A B", "A B") == (0, 2)
    assert word_errors("A", "") == (1, 1)


# ----------------------------------------------------------------------------- real-speech runs
def write_config(path: Path, corpus, train_manifest: str, dev: str | None = None, **sections) -> Path:
    cfg = {
        "model": {**TINY_MODEL, "dropout": 0.0},
        "data": {
            "train": str(corpus[train_manifest]),
            "dev": str(corpus[dev]) if dev else "",
            "tokenizer": str(corpus["tok"]),
            "max_frames": 20000,
            "max_utterances": 2,
            "num_workers": 0,
            "specaugment": None,
        },
        "train": {"epochs": 2, "lr": 0.002, "warmup_steps": 5, "log_interval": 1, "checkpoint_interval": 0,
                  "precision": "fp32"},  # the same numbers on every CPU (auto is bf16 where native)
    }
    for sec, values in sections.items():
        cfg[sec].update(values)
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_log(exp: Path) -> list[dict]:
    return [json.loads(line) for line in (exp / LOG_FILE).read_text().splitlines()]


def run_cli(args: list[str], env_extra: dict | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "asr", *args], env=env, capture_output=True, text=True, **kw)


def weights(exp: Path) -> dict[str, torch.Tensor]:
    return safe_load(exp / "model.pt")


def test_train_writes_model_dir_and_reruns_idempotently(corpus, tmp_path):
    cfg_path = write_config(tmp_path / "c.yaml", corpus, "short4", dev="short4")
    exp = tmp_path / "exp"
    summary = train(load_config(cfg_path), exp)
    assert summary["step"] == 4 and summary["epoch"] == 2  # 4 utterances, 2 per batch, 2 epochs
    for name in ("config.yaml", "tokenizer.model", "cmvn.json", "model.pt", "checkpoints/best.json"):
        assert (exp / name).is_file(), name
    rec = load_model(exp)
    assert rec.tokenizer.vocab_size == rec.model.vocab_size
    assert not torch.equal(rec.model.cmvn.mean, torch.zeros_like(rec.model.cmvn.mean))  # CMVN was computed and loaded
    recs = read_log(exp)
    train_recs = [r for r in recs if r["kind"] == "train"]
    dev_recs = [r for r in recs if r["kind"] == "dev"]
    assert [r["step"] for r in train_recs] == [1, 2, 3, 4]
    assert [r["epoch"] for r in dev_recs] == [1, 2]
    assert all(math.isfinite(r["dev_loss"]) and 0 <= r["dev_wer"] for r in dev_recs)
    (setup,) = [r for r in recs if r["kind"] == "setup"]  # what the run computed with, for RESULTS.md
    assert setup["precision"] == "fp32" and setup["device"] == "cpu" and set(setup["speed_paths"]) == set(speed.PATHS)
    assert [c["path"].name for c in list_checkpoints(exp)] == ["epoch_1.pt", "epoch_2.pt"]
    before = weights(exp)
    again = train(load_config(cfg_path), exp)  # the same command on a finished run: nothing to do
    assert again["step"] == 4
    assert all(torch.equal(before[k], v) for k, v in weights(exp).items())
    with pytest.raises(ConfigError, match="model.d_model: .* was trained with 96"):
        train(load_config(cfg_path, ["model.d_model=128"]), exp)
    with pytest.raises(FileNotFoundError, match="--resume given"):
        train(load_config(cfg_path), tmp_path / "fresh", resume=True)


def _patch_forward(monkeypatch, bad_calls, exc=None):
    """Make ASRModel.forward return a NaN loss (or raise ``exc``) on the listed call numbers."""
    from asr.model import ASRModel

    orig = ASRModel.forward
    calls = {"n": 0}

    def forward(self, *a, **k):
        calls["n"] += 1
        out = orig(self, *a, **k)
        if self.training and calls["n"] in bad_calls:
            if exc is not None:
                raise exc
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(ASRModel, "forward", forward)
    return calls


def test_nonfinite_loss_skips_step(corpus, tmp_path, monkeypatch):
    cfg_path = write_config(tmp_path / "c.yaml", corpus, "short4", train={"epochs": 1})
    _patch_forward(monkeypatch, {2})
    summary = train(load_config(cfg_path), tmp_path / "exp")
    assert summary["bad_steps"] == 1 and summary["step"] == 1  # 2 batches, the second skipped
    assert all(torch.isfinite(v).all() for v in weights(tmp_path / "exp").values() if v.is_floating_point())


def test_nonfinite_losses_in_a_row_abort_keeping_checkpoint(corpus, tmp_path, monkeypatch):
    cfg_path = write_config(
        tmp_path / "c.yaml", corpus, "short8", train={"epochs": 3, "max_bad_steps": 3, "checkpoint_interval": 1}
    )
    _patch_forward(monkeypatch, set(range(3, 100)))
    with pytest.raises(TrainingAborted, match="3 non-finite losses in a row"):
        train(load_config(cfg_path), tmp_path / "exp")
    cks = list_checkpoints(tmp_path / "exp")
    assert cks and cks[-1]["step"] == 2
    assert torch.isfinite(safe_load(cks[-1]["path"])["model"]["ctc.weight"]).all()


def test_out_of_memory_batch_skipped(corpus, tmp_path, monkeypatch):
    cfg_path = write_config(tmp_path / "c.yaml", corpus, "short8", train={"epochs": 1})
    _patch_forward(monkeypatch, {2}, exc=torch.OutOfMemoryError("CUDA out of memory (simulated)"))
    summary = train(load_config(cfg_path), tmp_path / "exp")
    assert summary["oom_batches"] == 1 and summary["step"] == 3


@pytest.mark.slow
def test_ddp_two_processes_match_one_process(corpus, tmp_path):
    """torchrun 2 x gloo with batches of 2 == 1 process accumulating 2 batches of 2: same global batch."""
    common = {"train": {"epochs": 2, "seed": 3}}
    one = write_config(tmp_path / "one.yaml", corpus, "short8", **common)
    one_yaml = yaml.safe_load(one.read_text())
    one_yaml["train"]["accum_grad"] = 2
    one.write_text(yaml.safe_dump(one_yaml))
    two = write_config(tmp_path / "two.yaml", corpus, "short8", **common)
    r1 = run_cli(["train", "--config", str(one), "--out", str(tmp_path / "one")], timeout=300)
    assert r1.returncode == 0, r1.stderr[-3000:]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r2 = subprocess.run(
        [*torchrun, "-m", "asr", "train", "--config", str(two), "--out", str(tmp_path / "two")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r2.returncode == 0, r2.stderr[-3000:]
    a = [r for r in read_log(tmp_path / "one") if r["kind"] == "train"]
    b = [r for r in read_log(tmp_path / "two") if r["kind"] == "train"]
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        assert abs(ra["loss"] - rb["loss"]) < 1e-5, (ra["step"], ra["loss"], rb["loss"])
        assert ra["lr"] == rb["lr"]
    wa, wb = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5, rtol=0) for k in wa)


@pytest.mark.parametrize("caller_joined", [False, True])
def test_train_leaves_only_the_process_group_it_joined(corpus, tmp_path, monkeypatch, caller_joined):
    """A gloo group left to interpreter exit aborts the process now and then (SIGABRT after a finished
    run): train() destroys the group it created, and leaves alone one its caller created."""
    import torch.distributed as dist

    import asr.training.train as T

    store = dist.FileStore(str(tmp_path / "store"), 1)

    def join(device="auto"):
        if not dist.is_initialized():
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        return T.DistEnv(0, 1, 0, torch.device("cpu"))

    if caller_joined:
        join()
    monkeypatch.setattr(T, "setup_distributed", join)
    cfg_path = write_config(tmp_path / "c.yaml", corpus, "short4", train={"epochs": 1})
    try:
        train(load_config(cfg_path), tmp_path / "exp")
        assert dist.is_initialized() == caller_joined
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _kill_config(tmp_path, corpus) -> Path:
    """Dropout, SpecAugment, tempo, noise, speed perturbation and a worker process: every RNG matters on resume."""
    return write_config(
        tmp_path / "c.yaml",
        corpus,
        "short8",
        model={"dropout": 0.1},
        data={
            "num_workers": 1,
            "max_utterances": 1,  # 8 steps an epoch: room to land the kill mid-epoch
            "speed_perturb": [0.9, 1.0, 1.1],
            "specaugment": {"freq_masks": 2, "freq_width": 10, "time_masks": 2, "time_width": 0.05, "tempo": 0.3},
            "noise": {"prob": 0.5},
        },
        train={"epochs": 3, "checkpoint_interval": 2, "keep_last": 10},
    )


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.time()
    while not path.exists():
        assert proc.poll() is None, f"training ended before {path.name} appeared: {proc.stderr.read()[-3000:]}"
        assert time.time() - t0 < timeout, f"{path} did not appear"
        time.sleep(0.005)


def kill_resume_and_compare(train_args: list[str], tmp_path: Path) -> dict[str, torch.Tensor]:
    """``asr train *train_args`` (8 steps an epoch, checkpoints every 2 steps) run through, and run again
    killed (SIGKILL) mid-epoch at step 10 and resumed: the same weights (returned) and the same logged
    losses, with no step twice."""
    ref = run_cli([*train_args, "--out", str(tmp_path / "ref")], timeout=300)
    assert ref.returncode == 0, ref.stderr[-3000:]

    exp = tmp_path / "killed"
    args = [sys.executable, "-m", "asr", *train_args, "--out", str(exp)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(exp / "checkpoints" / "step_10.pt", proc)  # epoch 2 is steps 9-16: step 10 is mid-epoch
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    newest = list_checkpoints(exp)[-1]
    assert newest["kind"] == "step" and newest["epoch"] == 1, "the kill did not land mid-epoch"
    assert safe_load(newest["path"])["sampler"]["pos"] > 0

    resumed = run_cli([*train_args, "--out", str(exp)], timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stderr
    w_ref, w_res = weights(tmp_path / "ref"), weights(exp)
    assert w_ref.keys() == w_res.keys()
    assert all(torch.equal(w_ref[k], w_res[k]) for k in w_ref), "resumed weights differ from the uninterrupted run"
    losses = lambda e: [(r["step"], r["loss"]) for r in read_log(e) if r["kind"] == "train"]  # noqa: E731
    assert losses(exp) == losses(tmp_path / "ref")  # the log reads as one run, no duplicated steps
    return w_res


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_is_bit_identical(corpus, tmp_path):
    kill_resume_and_compare(["train", "--config", str(_kill_config(tmp_path, corpus))], tmp_path)


@pytest.mark.slow
def test_sigterm_saves_and_exits_cleanly(corpus, tmp_path):
    cfg = _kill_config(tmp_path, corpus)
    exp = tmp_path / "exp"
    args = [sys.executable, "-m", "asr", "train", "--config", str(cfg), "--out", str(exp)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(exp / "checkpoints" / "step_2.pt", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM" in out and "Traceback" not in err
    newest = list_checkpoints(exp)[-1]
    logged = max(r["step"] for r in read_log(exp) if r["kind"] == "train")
    assert newest["step"] == logged >= 2  # the step it stopped at was saved
    assert safe_load(newest["path"])["step"] == logged


@pytest.mark.slow
def test_memorises_20_librispeech_utterances(corpus, tmp_path):
    """Tiny config, 20 real utterances (70 s), 300 steps: greedy WER on them must fall below 10%."""
    from asr.data.dataset import ASRDataset, collate
    from asr.data.manifest import read_manifest
    from asr.decode import greedy_search
    from asr.text import normalize

    cfg = load_config(REPO / "configs" / "tiny.yaml", [
        f"data.train={corpus['mem20']}", f"data.tokenizer={corpus['tok']}", "data.max_utterances=4",
        "data.max_frames=20000", "model.dropout=0.0", "model.label_smoothing=0.0", "train.epochs=60",
        "train.lr=0.003", "train.scheduler=cosine", "train.warmup_steps=30", "train.keep_best=0", "train.keep_last=1",
    ])  # fmt: skip
    t0 = time.time()
    summary = train(cfg, tmp_path / "exp")
    minutes = (time.time() - t0) / 60
    assert summary["step"] == 300
    rec = load_model(tmp_path / "exp")
    recs = read_manifest(corpus["mem20"])
    ds = ASRDataset(recs, rec.tokenizer, rec.config.data, train=False)
    batch = collate([ds[i] for i in range(len(ds))])
    memory, mem_lens = rec.model.encode(batch.feats, batch.feat_lens)
    hyps = greedy_search(rec.model, memory, mem_lens)
    errors = words = 0
    for r, hyp in zip(recs, hyps, strict=True):
        e, n = word_errors(normalize(r["text"]), normalize(rec.tokenizer.decode(hyp)))
        errors += e
        words += n
    wer = 100 * errors / words
    print(f"memorisation: WER {wer:.1f}% on {words} words after {minutes:.1f} min")
    assert wer < 10.0
    assert minutes < 10.0


def test_unreadable_files_counted_and_limit_enforced(corpus, tmp_path):
    from asr.data.dataset import DataError
    from asr.data.manifest import read_manifest, write_manifest

    recs = read_manifest(corpus["short4"])
    bad = tmp_path / "broken.flac"
    bad.write_bytes(b"not audio at all")
    recs[1] = {**recs[1], "id": "broken", "audio": str(bad)}
    write_manifest(tmp_path / "m.jsonl", recs)
    corpus = {**corpus, "m": tmp_path / "m.jsonl"}
    ok = write_config(tmp_path / "ok.yaml", corpus, "m", data={"max_skip_ratio": 0.5}, train={"epochs": 1})
    summary = train(load_config(ok), tmp_path / "exp_ok")
    assert summary["skipped_files"] == 1 and summary["seen_files"] == 4
    strict = write_config(tmp_path / "strict.yaml", corpus, "m", data={"max_skip_ratio": 0.1}, train={"epochs": 1})
    with pytest.raises(DataError, match="1 of 4 utterances"):
        train(load_config(strict), tmp_path / "exp_strict")


def test_plot_writes_png_or_says_what_is_missing(corpus, tmp_path):
    from asr.training.plot import plot_run

    cfg_path = write_config(tmp_path / "c.yaml", corpus, "short4", dev="short4", train={"epochs": 1})
    train(load_config(cfg_path), tmp_path / "exp")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install 'asr\[plot\]'"):
            plot_run(tmp_path / "exp")
    else:
        png = plot_run(tmp_path / "exp")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_names_the_first_tensor_that_does_not_fit(tmp_path):
    """A checkpoint whose tensors do not match the model of the config is a clear error naming the
    tensor and both shapes (conv_channels and conv_stack are checked by name too)."""
    from asr.checkpoint import check_state_fits as _check_same_shapes
    from asr.config import ModelConfig
    from asr.model import ASRModel
    from asr.training.checkpoints import SHAPE_KEYS

    assert {"conv_channels", "conv_stack"} <= set(SHAPE_KEYS)
    cfg = dict(input_dim=40, d_model=32, heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, vocab_size=8,
               frontend="conv2d")  # fmt: skip
    model = ASRModel(ModelConfig(**cfg, conv_channels=16))
    saved = ASRModel(ModelConfig(**cfg, conv_channels=8)).state_dict()
    with pytest.raises(ValueError, match=r"tensor 'frontend.conv.0.weight' has shape \(8, 1, 3, 3\).*\(16, 1, 3, 3\)"):
        _check_same_shapes(saved, model, tmp_path / "epoch_1.pt")
    _check_same_shapes(model.state_dict(), model, tmp_path / "epoch_1.pt")
    with pytest.raises(ValueError, match="has no tensor 'ctc.bias'"):
        _check_same_shapes({k: v for k, v in model.state_dict().items() if k != "ctc.bias"}, model, tmp_path)


def test_train_init_fine_tunes_from_a_model_directory(corpus, tmp_path):
    """train.init starts a fresh run from a model directory's weights and CMVN (fine-tuning); a model
    that does not fit the config, or a path that is not there, is an error naming it."""
    base = tmp_path / "base"
    train(load_config(write_config(tmp_path / "a.yaml", corpus, "short4", train={"epochs": 1})), base)
    # Fine-tune on other utterances at a negligible learning rate: the weights stay the base model's
    # (a random start would not), and so does its CMVN (these utterances would give other statistics).
    cfg_path = write_config(tmp_path / "b.yaml", corpus, "short8", train={"epochs": 1, "lr": 1e-12, "init": str(base)})
    tuned = tmp_path / "tuned"
    train(load_config(cfg_path), tuned)
    start, end = weights(base), weights(tuned)
    assert all(torch.allclose(start[k], v, atol=1e-6) for k, v in end.items())
    assert (tuned / "cmvn.json").read_text() == (base / "cmvn.json").read_text()
    fresh = tmp_path / "fresh"
    train(load_config(cfg_path, ['train.init=""']), fresh)
    assert not all(torch.allclose(start[k], v, atol=1e-6) for k, v in weights(fresh).items())
    assert (fresh / "cmvn.json").read_text() != (base / "cmvn.json").read_text()
    with pytest.raises(ValueError, match=r"model.pt: tensor .* has shape"):
        train(load_config(cfg_path, ["model.d_model=128"]), tmp_path / "other")
    with pytest.raises(FileNotFoundError, match="train.init: .*nowhere: no such model directory or checkpoint"):
        train(load_config(cfg_path, [f"train.init={tmp_path / 'nowhere'}"]), tmp_path / "none")
