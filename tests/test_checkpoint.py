"""Training checkpoints: atomic writes, safe loads, newest/fallback, pruning, averaging into a model dir."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.checkpoint import atomic_save, safe_load
from asr.config import load_config, save_config
from asr.inference import load_model
from asr.training.checkpoints import (
    average_checkpoints,
    average_state_dicts,
    checkpoint_path,
    list_checkpoints,
    load_latest_checkpoint,
    prune_checkpoints,
)
from asr.training.train import rng_state, set_rng_state

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def fake_ckpt(exp: Path, kind: str, number: int, step: int, value: float = 0.0, best=None) -> Path:
    p = checkpoint_path(exp, kind, number)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_save(
        {
            "model": {"w": torch.full((3,), value), "n": torch.tensor(step)},
            "step": step,
            "epoch": number if kind == "epoch" else 0,
            "best": best or [],
            "best_metric": "dev_loss",
        },
        p,
    )
    return p


def test_atomic_save_failure_keeps_previous(tmp_path, monkeypatch):
    p = tmp_path / "ck.pt"
    atomic_save({"step": 1, "w": torch.ones(4)}, p)

    def broken_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        atomic_save({"step": 2, "w": torch.zeros(4)}, p)
    monkeypatch.undo()
    assert safe_load(p)["step"] == 1
    assert list(tmp_path.iterdir()) == [p], "the temporary file was left behind"


def test_safe_load_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    p = tmp_path / "evil.pt"
    torch.save({"x": Evil()}, p)
    with pytest.raises(ValueError, match="cannot load checkpoint safely"):
        safe_load(p)


def test_rng_states_roundtrip_weights_only(tmp_path):
    g = torch.Generator().manual_seed(3)
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(4)
    atomic_save({"rng": [rng_state(g)]}, tmp_path / "r.pt")
    expect = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=g))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    g.manual_seed(9)
    set_rng_state(safe_load(tmp_path / "r.pt")["rng"][0], g)
    got = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=g))
    assert got[0] == expect[0] and got[1] == expect[1]
    assert torch.equal(got[2], expect[2]) and torch.equal(got[3], expect[3])


def test_latest_prefers_epoch_end_and_falls_back(tmp_path):
    fake_ckpt(tmp_path, "step", 4, 4)
    fake_ckpt(tmp_path, "epoch", 1, 5)
    fake_ckpt(tmp_path, "step", 5, 5)  # same step as epoch_1: the epoch checkpoint is newer
    path, ck = load_latest_checkpoint(tmp_path)
    assert path.name == "epoch_1.pt"
    newest = fake_ckpt(tmp_path, "step", 8, 8)
    newest.write_bytes(b"garbage")  # a damaged newest file is skipped
    path, ck = load_latest_checkpoint(tmp_path)
    assert path.name == "epoch_1.pt" and ck["step"] == 5
    assert load_latest_checkpoint(tmp_path / "nothing") is None


def test_prune_keeps_last_and_best(tmp_path):
    for e in range(1, 6):
        fake_ckpt(tmp_path, "step", e * 10 - 5, e * 10 - 5)
        fake_ckpt(tmp_path, "epoch", e, e * 10)
    fake_ckpt(tmp_path, "step", 52, 52)
    fake_ckpt(tmp_path, "step", 54, 54)
    prune_checkpoints(tmp_path, keep_last=2, protect={"epoch_1.pt"})
    names = [c["path"].name for c in list_checkpoints(tmp_path)]
    assert names == ["epoch_1.pt", "epoch_4.pt", "epoch_5.pt", "step_52.pt", "step_54.pt"]


def test_average_state_dicts():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(7)}
    avg = average_state_dicts([a, b])
    assert torch.equal(avg["w"], torch.tensor([2.0, 4.0]))
    assert int(avg["n"]) == 7  # integer buffers: the last state's
    with pytest.raises(ValueError, match="lacks 'w'"):
        average_state_dicts([{"n": torch.tensor(1)}, b])


def test_average_checkpoints_into_model_dir(tmp_path):
    from asr.model import ASRModel

    cfg = load_config(CONFIGS / "tiny.yaml", ["model.vocab_size=10"])
    exp = tmp_path / "exp"
    (exp / "checkpoints").mkdir(parents=True)
    save_config(cfg, exp / "config.yaml")
    states = []
    for e in range(1, 4):
        torch.manual_seed(e)
        sd = ASRModel(cfg.model).state_dict()
        states.append(sd)
        ranked = [{"name": f"epoch_{i}.pt", "value": float(10 - i), "epoch": i, "step": i} for i in (3, 2, 1)][-e:]
        atomic_save(
            {"model": sd, "step": e, "epoch": e, "best": ranked, "best_metric": "dev_loss"},
            checkpoint_path(exp, "epoch", e),
        )
    out, used = average_checkpoints(exp, 2, "last", tmp_path / "last2")
    assert [p.name for p in used] == ["epoch_2.pt", "epoch_3.pt"]
    k = "encoder.layers.0.ffn.0.weight"
    assert torch.allclose(load_model(out).model.state_dict()[k], (states[1][k] + states[2][k]) / 2)
    out, used = average_checkpoints(exp, 1, "best", tmp_path / "best1")
    assert [p.name for p in used] == ["epoch_3.pt"]
    assert torch.equal(load_model(out).model.state_dict()[k], states[2][k])
    with pytest.raises(ValueError, match="--num 5 asked"):
        average_checkpoints(exp, 5, "last", tmp_path / "x")
    with pytest.raises(ValueError, match="--num 4 asked"):
        average_checkpoints(exp, 4, "best", tmp_path / "x")


def test_atomic_write_keeps_the_old_file_on_error_and_stale_temporaries_are_removed(tmp_path):
    from asr.atomic import atomic_write, atomic_write_text, remove_stale_temporaries, temporary_name

    p = tmp_path / "best.json"
    atomic_write_text(p, "one")
    with pytest.raises(RuntimeError):
        with atomic_write(p) as f:
            f.write("two")
            raise RuntimeError("killed")
    assert p.read_text() == "one" and sorted(x.name for x in tmp_path.iterdir()) == ["best.json"]
    dead = tmp_path / ".epoch_3.pt.tmp999999999"  # a writer that no longer exists (beyond any pid)
    dead.write_bytes(b"torn")
    live = temporary_name(tmp_path / "model.pt")  # this process is still writing it
    live.write_bytes(b"in progress")
    assert remove_stale_temporaries(tmp_path) == [dead]
    assert live.exists() and p.read_text() == "one"
