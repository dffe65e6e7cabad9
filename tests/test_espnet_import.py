"""``asr import espnet``: the imported model computes what ESPnet computes (fixtures ESPnet itself wrote).

The fixtures under tests/fixtures/espnet/ are small ESPnet models in ESPnet's on-disk layout and
ESPnet's outputs on real LibriSpeech utterances (tests/make_espnet_fixtures.py, run with ESPnet
installed, writes and re-checks them); ESPnet is not needed here. Real audio comes from
../shared/data (or $ASR_TEST_DATA): those tests skip without it.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from espnet_equivalence import (
    DEEP_TOL,
    F64_GRAD_TOL,
    FIXTURES,
    REL_TOL,
    SCORE_TOL,
    TOL,
    compare_published_shapes,
    float32_gradients_ok,
    forward_maxima,
    load_fixture,
    search_results,
    training_maxima,
    utterances,
)

from asr.importers import EspnetImportError, import_espnet

MODELS = sorted(p.name for p in FIXTURES.iterdir() if (p / "espnet_outputs.pt").is_file())
WITH_GRADS = [m for m in MODELS if "float64" in load_fixture(FIXTURES / m)]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("name", MODELS)
def test_forward_matches_espnet(name, data_root):
    """Features, encoder output, CTC log-probabilities, teacher-forced decoder logits (padded batch)."""
    got = forward_maxima(FIXTURES / name, data_root)
    assert got["feat_lens_equal"] == 1.0 and got["enc_lens_equal"] == 1.0, got
    for key in ("features", "encoder", "ctc_log_probs", "decoder_logits"):
        if key in got:
            assert got[key] <= TOL, (key, got)
    assert got.get("features_deep", 0.0) <= DEEP_TOL, got  # bands > DEEP nats below their frame's peak (fp32's limit)


@pytest.mark.parametrize("name", WITH_GRADS)
def test_training_matches_espnet(name, data_root):
    """loss, loss_att, loss_ctc, acc and every parameter's gradient (padding: espnet, no dropout).

    Gradients against ESPnet's float64 ones (stored rounded to float32): ours in float64 agree to
    1e-6 (the formulas are the same); ours in float32 are as close as ESPnet's own float32
    gradients are (float32 rounding)."""
    got = training_maxima(FIXTURES / name, data_root)
    for key in ("loss", "loss_att", "loss_ctc", "acc", "loss_float64", "loss_att_float64", "loss_ctc_float64",
                "acc_float64"):
        assert got[key] <= REL_TOL, (key, got)
    assert got["gradients_float64"] <= F64_GRAD_TOL and got["gradients_float64_worst_tensor"] <= F64_GRAD_TOL, got
    assert float32_gradients_ok(got), got
    assert got["espnet_gradients_not_compared"] == 0


@pytest.mark.parametrize("beam", ["10", "20"])
def test_search_matches_speech2text(beam, data_root):
    """The batched beam search gives Speech2Text's best hypothesis (CTC weight 0.3) and its score."""
    name = "trained_100h"
    theirs = load_fixture(FIXTURES / name)["hyps"][beam]
    ours = search_results(FIXTURES / name, data_root, int(beam))
    for o, t in zip(ours, theirs, strict=True):
        assert o["tokens"] == t["tokens"], (t["id"], o, t)
        assert abs(o["score"] - t["score"]) <= SCORE_TOL, (t["id"], o["score"], t["score"])


def test_transcribe_gives_speech2texts_text(tmp_path, data_root):
    """End to end through ``asr.inference.transcribe`` (audio file, features from the config, tokenizer): the
    imported model writes what ESPnet's Speech2Text wrote for each utterance (beam 10, CTC 0.3)."""
    import asr

    out = import_espnet(tmp_path / "m", FIXTURES / "trained_100h")
    theirs = load_fixture(FIXTURES / "trained_100h")["hyps"]["10"]
    paths = {u["id"]: data_root / u["path"] for u in utterances()["search"]}
    texts = asr.transcribe(out, [paths[t["id"]] for t in theirs], beam_size=10, ctc_weight=0.3)
    assert texts == [t["text"] for t in theirs]


def test_asr_decode_gives_speech2texts_hypotheses(tmp_path, data_root):
    """``asr decode`` on a manifest, in batches: Speech2Text's best hypotheses and scores (beam 20)."""
    from asr.cli import main

    model = import_espnet(tmp_path / "m", FIXTURES / "trained_100h")
    theirs = {t["id"]: t for t in load_fixture(FIXTURES / "trained_100h")["hyps"]["20"]}
    manifest = tmp_path / "test.jsonl"
    lines = [json.dumps({"id": u["id"], "audio": str(data_root / u["path"]), "duration": u["samples"] / 16000,
                         "text": u["text"]}) for u in utterances()["search"]]
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "hyp.jsonl"
    args = ["decode", "--model", str(model), "--manifest", str(manifest), "--out", str(out), "--beam-size", "20",
            "--ctc-weight", "0.3", "--num-workers", "0"]
    assert main(args) == 0
    ours = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(h["id"] for h in ours) == sorted(theirs)
    for h in ours:
        assert h["text"] == theirs[h["id"]]["text"] and abs(h["score"] - theirs[h["id"]]["score"]) <= SCORE_TOL


def test_published_configurations_have_espnets_parameters():
    """The two published full-size configurations: every ESPnet tensor has our shape, counts equal."""
    published = json.loads((FIXTURES / "published_shapes.json").read_text())
    for name, got in compare_published_shapes(published).items():
        assert got["mismatches"] == [] and got["uncovered"] == [], (name, got)
        assert got["asr"] == got["espnet"], (name, got)


def test_config_file_is_the_published_100h_model():
    """configs/librispeech/transformer_100h_espnet.yaml builds what an import of the 100 h model builds."""
    from asr.config import load_config
    from asr.importers.espnet import convert_config

    entry = json.loads((FIXTURES / "published_shapes.json").read_text())["transformer_100h"]
    tokens = ["<blank>", "<unk>"] + ["t"] * (entry["vocab_size"] - 3) + ["<sos/eos>"]
    esp = dict(entry["espnet_config"], token_list=tokens)
    imported = convert_config(esp)
    ours = load_config(FIXTURES.parents[2] / "configs" / "librispeech" / "transformer_100h_espnet.yaml")
    ours.model.vocab_size = entry["vocab_size"]
    assert ours.model == imported.model
    for k in ("features", "n_fft", "win_length", "hop_length", "num_mel_bins", "sample_rate"):
        assert getattr(ours.data, k) == getattr(imported.data, k), k


def test_tokenizer_gives_espnets_ids(tmp_path):
    """The rewritten SentencePiece model turns each transcript into the ids ESPnet trained with."""
    from asr.text import Tokenizer

    out = import_espnet(tmp_path / "m", FIXTURES / "small_100h")
    tok = Tokenizer.load(out)
    ref = load_fixture(FIXTURES / "small_100h")
    for i, u in enumerate(utterances()["batch"]):
        n = int(ref["token_lens"][i])
        assert tok.encode(u["text"]) == ref["tokens"][i, :n].tolist()
        assert tok.decode(tok.encode(u["text"])) == u["text"]


def test_cli_import_makes_a_model_directory(tmp_path):
    from asr.cli import main
    from asr.inference import load_model

    out = tmp_path / "model"
    assert main(["import", "espnet", str(FIXTURES / "small_100h"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["cmvn.json", "config.yaml", "model.pt", "tokenizer.model"]
    load_model(out)  # loads whatever load_model returns; the config and weights fit


def test_asr_average_takes_imported_model_directories(tmp_path):
    """`asr average --models` averages model directories of one architecture (imported ones too):
    a model with itself gives its own weights; another architecture is refused by key."""
    from asr.cli import main
    from asr.inference import load_model

    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for out, fixture in ((a, "small_100h"), (b, "small_100h"), (c, "small_960h")):
        import_espnet(out, FIXTURES / fixture)
    w = load_model(a).model.state_dict()
    sb = torch.load(b / "model.pt", weights_only=True)  # b differs from a: the average is the mean, not a copy
    torch.save({k: v + 1.0 if v.is_floating_point() else v for k, v in sb.items()}, b / "model.pt")
    assert main(["average", "--models", str(a), str(b), "--out", str(tmp_path / "avg")]) == 0
    avg = load_model(tmp_path / "avg").model.state_dict()
    k = next(k for k, v in w.items() if v.is_floating_point() and v.numel() > 1)
    assert torch.allclose(avg[k], w[k] + 0.5)
    assert main(["average", "--models", str(a), str(c), "--out", str(tmp_path / "x")]) == 2


def test_cli_explicit_files(tmp_path):
    from asr.cli import main

    src = FIXTURES / "small_100h"
    exp = src / "exp" / "asr_train"
    args = ["import", "espnet", "--out", str(tmp_path / "m"), "--config", str(exp / "config.yaml"),
            "--weights", str(exp / "valid.acc.ave.pth"),
            "--stats", str(src / "exp" / "asr_stats" / "train" / "feats_stats.npz"),
            "--bpe", str(src / "data" / "token_list" / "bpe_unigram" / "bpe.model")]
    assert main(args) == 0


def _copy_with_config(tmp_path, change) -> tuple:
    src = tmp_path / "espnet"
    shutil.copytree(FIXTURES / "small_100h", src)
    cfg_file = src / "exp" / "asr_train" / "config.yaml"
    cfg = yaml.safe_load(cfg_file.read_text())
    change(cfg)
    cfg_file.write_text(yaml.safe_dump(cfg))
    return src, tmp_path / "out"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(encoder="conformer"), "encoder='conformer' is not supported"),
        (lambda c: c.update(decoder="rnn"), "decoder='rnn' is not supported"),
        (lambda c: c.update(frontend="s3prl"), "frontend='s3prl' is not supported"),
        (lambda c: c["encoder_conf"].update(input_layer="conv2d2"), "encoder_conf.input_layer='conv2d2'"),
        (lambda c: c["encoder_conf"].update(macaron_style=True), "unknown key encoder_conf.macaron_style=True"),
        (lambda c: c["frontend_conf"].update(window="hamming"), "frontend_conf.window='hamming'"),
        (lambda c: c["model_conf"].update(length_normalized_loss=True), "model_conf.length_normalized_loss=True"),
    ],
)
def test_unsupported_config_is_named_and_nothing_is_written(tmp_path, change, message):
    src, out = _copy_with_config(tmp_path, change)
    with pytest.raises(EspnetImportError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        import_espnet(out, src)
    assert "config.yaml" in str(e.value)
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_tensor_mismatch_names_tensor_and_both_shapes(tmp_path):
    src = tmp_path / "espnet"
    shutil.copytree(FIXTURES / "small_100h", src)
    pth = src / "exp" / "asr_train" / "valid.acc.ave.pth"
    state = torch.load(pth, weights_only=True)
    name = "encoder.encoders.1.feed_forward.w_1.weight"
    good = tuple(state[name].shape)
    state[name] = torch.zeros(good[0] + 1, good[1])
    torch.save(state, pth)
    out = tmp_path / "out"
    with pytest.raises(EspnetImportError) as e:
        import_espnet(out, src)
    msg = str(e.value)
    assert name in msg and str((good[0] + 1, good[1])) in msg and str(good) in msg and "valid.acc.ave.pth" in msg
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_unexpected_tensor_is_named(tmp_path):
    src = tmp_path / "espnet"
    shutil.copytree(FIXTURES / "small_100h", src)
    pth = src / "exp" / "asr_train" / "valid.acc.ave.pth"
    state = torch.load(pth, weights_only=True)
    state["encoder.extra.weight"] = torch.zeros(2)
    torch.save(state, pth)
    with pytest.raises(EspnetImportError, match="encoder.extra.weight"):
        import_espnet(tmp_path / "out", src)


def test_existing_output_is_not_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(EspnetImportError, match="not empty"):
        import_espnet(out, FIXTURES / "small_100h")
    assert (out / "keep.txt").read_text() == "mine"


# ---- the model and data options the importer sets, on their own (no fixtures needed) ----


@pytest.mark.parametrize("frontend", ["conv2d", "conv2d6", "conv2d8", "linear_norm"])
@pytest.mark.parametrize("padding", ["exact", "espnet"])
def test_frontend_min_input_frames(frontend, padding):
    """The shortest input gives one encoder frame, one frame less gives none (ESPnet's input layers)."""
    from asr.config import ModelConfig
    from asr.model import ASRModel

    cfg = ModelConfig(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, vocab_size=5,
                      frontend=frontend, padding=padding)
    model = ASRModel(cfg).eval()
    n = model.min_input_frames
    with torch.no_grad():
        _, lens = model.encode(torch.randn(1, n, 80), torch.tensor([n]))
    assert int(lens[0]) >= 1
    if n > 1:
        assert int(model.encoder_lengths(torch.tensor([n - 1]))[0]) == 0


def test_espnet_lengths_count_frames_that_read_padding():
    """padding: espnet gives ceil(len / 2) per stride-2 convolution, capped by the batch's frames."""
    from asr.model.frontend import Conv2dFrontend

    fe = Conv2dFrontend(80, 8, espnet_lengths=True)
    lens = torch.tensor([100, 37, 7])
    assert fe.output_lengths(lens, 100).tolist() == [24, 10, 2]  # ceil(ceil(37/2)/2) = 10; 100 frames give 24
    assert fe.output_lengths(lens).tolist() == Conv2dFrontend(80, 8).output_lengths(lens).tolist()  # alone: ours


def test_espnet_features_through_compute_features():
    from asr.config import DataConfig
    from asr.features import compute_features
    from asr.features.espnet import espnet_log_mel

    wav = torch.randn(16000) * 0.1
    cfg = DataConfig(features="espnet", n_fft=512, win_length=400, hop_length=160)
    (got,) = compute_features([wav], cfg)
    want, n = espnet_log_mel(wav.unsqueeze(0), torch.tensor([16000]))
    assert got.shape == (101, 80) and int(n[0]) == 101  # centred frames: 1 + 16000 // 160
    assert torch.equal(got, want[0])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("model.label_smoothing_mode=smooth", "model.label_smoothing_mode"),
        ("model.padding=zeros", "model.padding"),
        ("model.utterance_cvn=true", "model.utterance_cvn"),
        ("model.frontend=conv2d4", "model.frontend"),
        ("data.features=mfcc", "data.features"),
        ("data.win_length=1024", "data.win_length"),
    ],
)
def test_new_config_keys_are_checked_by_name(override, key):
    from asr.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_kl_label_smoothing_is_espnets_formula():
    """eps / (V - 1) off the label, KL divergence: written out with a smoothed target distribution."""
    from asr.model.asr_model import IGNORE_ID, kl_label_smoothing

    logits, target, eps = torch.randn(6, 7), torch.tensor([1, 2, 3, IGNORE_ID, 5, 0]), 0.1
    keep = target != IGNORE_ID
    dist = torch.full((int(keep.sum()), 7), eps / 6).scatter_(1, target[keep].unsqueeze(1), 1 - eps)
    want = (dist * (dist.log() - torch.log_softmax(logits[keep], -1))).sum()
    assert torch.allclose(kl_label_smoothing(logits, target, eps), want, rtol=1e-6)
