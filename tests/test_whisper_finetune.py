"""Fine-tuning an imported Whisper with asr's own loop: its loss and gradients equal transformers', a CTC
head added by train.init starts fresh, train.freeze keeps tensors fixed, and training lowers the loss.

The reference (tests/fixtures/whisper/en/loss.pt) is transformers' WhisperForConditionalGeneration on the
random English-only fixture model: one batch of two LibriSpeech utterances (30-second windows), decoder
input = Whisper's prompt (start of transcript, no-timestamps) + the text tokens, labels = the text tokens
and end of text (the prompt's positions are not counted), dropout off. transformers averages the loss
over the label tokens; asr sums it per utterance and averages over the batch, so asr's loss times
B / tokens is transformers' (and so are the gradients). It holds both in float32 and in float64, where
rounding no longer hides a difference.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("tokenizers", reason="the 'whisper' extra: pip install 'asr[whisper]'")

from asr.checkpoint import load_init_weights  # noqa: E402
from asr.config import load_config  # noqa: E402
from asr.features import compute_features  # noqa: E402
from asr.importers.whisper import import_whisper  # noqa: E402
from asr.model import ASRModel  # noqa: E402
from asr.training.optim import freeze  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "whisper"
REF = torch.load(FIX / "en" / "loss.pt", weights_only=True)


@pytest.fixture(scope="module")
def en_dir(tmp_path_factory) -> Path:
    return import_whisper(FIX / "en" / "hf", tmp_path_factory.mktemp("ft") / "en")


def _batch(data_root: Path, cfg):
    import soundfile as sf

    wavs = []
    for uid in REF["utterances"]:
        spk, chap, _ = uid.split("-")
        path = next((data_root / "LibriSpeech").glob(f"*/{spk}/{chap}/{uid}.flac"))
        wavs.append(torch.from_numpy(sf.read(path, dtype="float32")[0]))
    feats = torch.stack(compute_features(wavs, cfg.data))
    toks = REF["text_tokens"]
    lens = torch.tensor([len(t) for t in toks])
    tokens = torch.zeros(len(toks), int(lens.max()), dtype=torch.long)
    for i, t in enumerate(toks):
        tokens[i, : len(t)] = torch.tensor(t)
    return feats, torch.full((len(toks),), feats.shape[1]), tokens, lens


# transformers' name -> (asr's name, rows of it): the fused projections hold q, k, v (or k, v) in row blocks
D = 8


def _ours(name: str) -> tuple[str, slice]:
    all_rows = slice(None)
    table = {
        "model.encoder.conv1.weight": ("frontend.conv1.weight", all_rows),
        "model.encoder.conv2.bias": ("frontend.conv2.bias", all_rows),
        "model.encoder.layers.0.self_attn.q_proj.weight": ("encoder.layers.0.attn.qkv.weight", slice(0, D)),
        "model.encoder.layers.1.self_attn.k_proj.weight": ("encoder.layers.1.attn.qkv.weight", slice(D, 2 * D)),
        "model.encoder.layers.1.fc1.weight": ("encoder.layers.1.ffn.0.weight", all_rows),
        "model.encoder.layer_norm.weight": ("encoder.norm.weight", all_rows),
        "model.decoder.layers.0.self_attn.v_proj.weight": ("decoder.layers.0.self_attn.qkv.weight", slice(2 * D, None)),
        "model.decoder.layers.1.encoder_attn.q_proj.weight": ("decoder.layers.1.cross_attn.q.weight", all_rows),
        "model.decoder.layers.1.encoder_attn.k_proj.weight": ("decoder.layers.1.cross_attn.kv.weight", slice(0, D)),
        "model.decoder.layers.1.fc2.weight": ("decoder.layers.1.ffn.3.weight", all_rows),
        "model.decoder.layer_norm.bias": ("decoder.norm.bias", all_rows),
        "model.decoder.embed_positions.weight": ("decoder.pos.table", all_rows),
    }
    return table[name]


def _loss_and_gradients(model, feats, feat_lens, tokens, token_lens, ref) -> tuple[float, float]:
    """Relative difference of the loss to transformers' (``ref``), and the worst relative difference
    (2-norm) of the stored gradients, after one forward and backward of ``model`` on the batch."""
    model.zero_grad(set_to_none=True)
    out = model(feats, feat_lens, tokens, token_lens)
    n = int(REF["num_label_tokens"])
    assert int(out["num_tokens"]) == n
    loss = out["loss"] * feats.shape[0] / n  # transformers' mean over label tokens
    want = float(ref["loss_tensor"])
    rel_loss = abs(float(loss.detach()) - want) / abs(want)
    loss.backward()
    params = dict(model.named_parameters())
    worst = 0.0
    for name, g_ref in ref["grads"].items():
        ours, rows = _ours(name)
        g = params[ours].grad[rows][: g_ref.shape[0]]
        worst = max(worst, float((g.double() - g_ref.double()).norm() / g_ref.double().norm()))
    emb = params["decoder.embed.weight"].grad[REF["embed_rows"]].double()
    worst = max(worst, float((emb - ref["embed_grad"].double()).norm() / ref["embed_grad"].double().norm()))
    return rel_loss, worst


def test_loss_and_gradients_equal_transformers(en_dir, data_root):
    """float32 from asr's own features (the fine-tuning path end to end: within rounding, which alone
    reaches 1e-5 here: transformers' eager and sdpa attention differ by 1.1e-5 in these gradients);
    float64 from the same input features as transformers': the arithmetic is the same to 1e-10."""
    cfg = load_config(en_dir / "config.yaml")
    assert cfg.model.prompt == REF["prompt"]
    model = ASRModel(cfg.model)
    load_init_weights(model, en_dir / "model.pt")
    model.train()  # dropout 0 in an imported Whisper
    feats, feat_lens, tokens, token_lens = _batch(data_root, cfg)
    rel32, worst32 = _loss_and_gradients(model, feats, feat_lens, tokens, token_lens, REF)
    model.double()
    rel64, worst64 = _loss_and_gradients(model, REF["input_features"].transpose(1, 2).double(), feat_lens,
                                         tokens, token_lens, REF["float64"])
    print(f"\nfloat32: loss relative difference {rel32:.1e}, gradients worst {worst32:.1e}; "
          f"float64: loss {rel64:.1e}, gradients {worst64:.1e}")
    assert rel32 <= 1e-5 and worst32 <= 1e-4
    assert rel64 <= 1e-10 and worst64 <= 1e-10


def test_init_adds_a_fresh_ctc_head_and_freeze_keeps_tensors(en_dir, data_root):
    sets = ["model.ctc_head=true", "model.ctc_weight=0.3", "model.ctc_blank_bias=11"]
    cfg = load_config(en_dir / "config.yaml", sets)
    model = ASRModel(cfg.model)
    assert load_init_weights(model, en_dir / "model.pt") == ["ctc.bias", "ctc.weight"]
    blank = cfg.model.blank_id
    assert blank == 50361 and float(model.ctc.bias.detach()[blank]) == 11.0  # <|nospeech|>, starting with half the mass
    assert float(model.ctc.bias.detach()[torch.arange(cfg.model.vocab_size) != blank].abs().max()) < 1
    frozen = freeze(model, ["frontend.", "encoder."])
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    feats, feat_lens, tokens, token_lens = _batch(data_root, cfg)
    losses = []
    model.train()
    for _ in range(4):
        out = model(feats, feat_lens, tokens, token_lens)
        out["loss"].backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(out["loss"].detach()))
    after = dict(model.named_parameters())
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)
    assert not torch.equal(before["ctc.weight"], after["ctc.weight"])
    assert not torch.equal(before["decoder.norm.weight"], after["decoder.norm.weight"])
    assert losses[-1] < losses[0], losses
    with pytest.raises(ValueError, match="'decoder.nothing' names no parameter"):
        freeze(model, ["decoder.nothing"])


def test_init_refuses_a_tensor_of_another_shape(en_dir, tmp_path):
    cfg = load_config(en_dir / "config.yaml")
    state = torch.load(en_dir / "model.pt", weights_only=True)
    state["decoder.norm.weight"] = torch.zeros(3)
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"'decoder\.norm\.weight' has shape \(3,\).*needs \(8,\)"):
        load_init_weights(ASRModel(cfg.model), tmp_path / "bad.pt")


def test_librispeech_finetune_config_runs_two_steps(en_dir, data_root, tmp_path):
    """configs/librispeech/whisper_finetune.yaml (for GPUs) after the imported model's config: two steps
    on the shared LibriSpeech utterances, a CTC head added, the loss finite."""
    import json

    from asr.corpora.librispeech import prepare_librispeech
    from asr.training.train import train

    prepare_librispeech(data_root / "LibriSpeech", ["dev-clean", "test-clean"], tmp_path / "data", progress=False)
    cfg = load_config(
        [en_dir / "config.yaml", Path(__file__).parents[1] / "configs" / "librispeech" / "whisper_finetune.yaml"],
        [f"train.init={en_dir}", f"data.tokenizer={en_dir}", f"data.train={tmp_path / 'data' / 'test-clean.jsonl'}",
         f"data.dev={tmp_path / 'data' / 'dev-clean.jsonl'}", "train.max_steps=2", "data.num_workers=0",
         "data.max_frames=4000", "train.dev_wer=false", "train.log_interval=1"],
    )
    assert cfg.model.ctc_head and cfg.model.d_model == 8 and cfg.train.lr_scales == ["ctc.=30"]
    train(cfg, tmp_path / "exp", device="cpu")
    steps = [json.loads(x) for x in (tmp_path / "exp" / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in steps if "loss_att" in r]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert (tmp_path / "exp" / "tokenizer.json").is_file()


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_is_bit_identical(en_dir, corpus, tmp_path):
    """Fine-tuning from an imported Whisper (train.init, a fresh CTC head, the encoder frozen, a learning
    rate scale, dropout, SpecAugment, speed perturbation, a loader worker) killed mid-epoch, then resumed:
    the same weights and losses as the uninterrupted run. Resuming reads the checkpoint, not train.init."""
    from test_train import kill_resume_and_compare, read_log

    sets = [
        f"train.init={en_dir}", f"data.train={corpus['short8']}", f"data.tokenizer={en_dir}", "data.dev=''",
        "model.ctc_head=true", "model.ctc_weight=0.3", "model.dropout=0.1", "data.pad_to=0",
        "data.normalizer=lower", "data.num_workers=1", "data.max_utterances=1", "data.speed_perturb=[0.9,1.0,1.1]",
        "data.specaugment.freq_masks=2", "data.specaugment.time_masks=2", "train.epochs=3", "train.lr=0.001",
        "train.checkpoint_interval=2", "train.keep_last=10", "train.log_interval=1", "train.dev_wer=false",
        "train.precision=fp32", "train.freeze=[encoder.]", "train.lr_scales=[ctc.=30]",
    ]
    args = ["train", "--config", str(en_dir / "config.yaml")] + [a for s in sets for a in ("--set", s)]
    w = kill_resume_and_compare(args, tmp_path)
    assert "ctc.weight" in w
    assert len([r for r in read_log(tmp_path / "killed") if r["kind"] == "train"]) == 24


def test_train_init_flag_defaults_to_the_model_directorys_config(en_dir, corpus, tmp_path):
    """`asr train --init DIR` without --config: DIR's config.yaml, DIR's weights, a CTC head added fresh."""
    from test_train import read_log, run_cli

    sets = [f"data.train={corpus['short4']}", f"data.tokenizer={en_dir}", "data.dev=''", "model.ctc_head=true",
            "model.ctc_weight=0.3", "data.pad_to=0", "data.normalizer=lower", "train.max_steps=1",
            "train.dev_wer=false", "train.precision=fp32", "train.log_interval=1"]
    out = run_cli(["train", "--init", str(en_dir), "--out", str(tmp_path / "ft")]
                  + [a for s in sets for a in ("--set", s)], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"initialised from {en_dir / 'model.pt'}" in out.stderr
    assert "new, from scratch: ctc.bias, ctc.weight" in out.stderr
    assert [r["step"] for r in read_log(tmp_path / "ft") if r["kind"] == "train"] == [1]
    none = run_cli(["train", "--out", str(tmp_path / "x")])
    assert none.returncode != 0 and "--config is required (or --init MODEL_DIR" in none.stderr
