"""ESPnet's own outputs for small Transformer models, as test fixtures for ``asr import espnet``.

Runs in tools/peers/.venv (ESPnet installed; see tools/peers/setup.sh). ESPnet's own code builds
each model (``ASRTask.build_model`` from a config in ESPnet's format), the model is saved in
ESPnet's on-disk layout (``exp/asr_train/config.yaml``, ``exp/asr_train/valid.acc.ave.pth``,
``exp/asr_stats/train/feats_stats.npz``, ``data/token_list/bpe_unigram/bpe.model``), and
ESPnet computes on real LibriSpeech utterances from ../shared/data (or $ASR_TEST_DATA):

    features       its DefaultFrontend on the padded batch                    (B, T, F)
    encoder        encoder output and lengths after its normaliser            (B, T', D)
    ctc            CTC log-probabilities                                      (B, T', V)
    decoder        decoder logits under teacher forcing                       (B, U + 1, V)
    training       loss, loss_att, loss_ctc, acc and every parameter's gradient (eval mode: no dropout)
    search         Speech2Text's best hypothesis and score, beam 10 and 20, CTC weight 0.3, one utterance at a time

Models (all small: kilobytes; tests/fixtures/espnet/<name>/):

    small_100h      the published 100 h layout (pyf98/librispeech_100h_transformer): STFT 512/400/160,
                    global_mvn, conv2d, pre-norm, 4 heads, encoder FFN < decoder FFN, CTC 0.3, lsm 0.1
    small_960h      the published 960 h layout (asr_train_asr_transformer_e18): default STFT 512/512/128,
                    global_mvn, conv2d6 (2 x 3 subsampling), 8 heads
    trained_100h    small_100h's layout trained for a few hundred steps on these utterances, so that its
                    outputs are peaked and the beam search has real choices to make
    variant_*       the other options: conv2d8, linear input layer, utterance_mvn with norm_vars

The full-size published configurations are also built (not saved): their parameter shapes,
tensor by tensor, go to published_shapes.json.

    tools/peers/.venv/bin/python tests/make_espnet_fixtures.py            # regenerate everything
    tools/peers/.venv/bin/python tests/make_espnet_fixtures.py --check    # recompute with ESPnet, compare
                                                                     # with the fixtures and with asr
"""

from __future__ import annotations

import argparse
import collections
import copy
import io
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "espnet"

# Utterances: the shortest of test-clean / dev-clean / test-other (real speech, kilobytes of outputs)
N_BATCH = 3  # utterances in the forward/training batch
N_SEARCH = 6  # utterances decoded by Speech2Text (trained model): as many it learnt, as many it did not
N_TRAIN = 16  # utterances the trained model learns from (few: it learns them well, its outputs are peaked)
TRAIN_STEPS = 400

# ESPnet configs in ESPnet's own key names. Full sizes: the published models as described in
# README "Use a published model" (their config.yaml cannot be downloaded here).
FULL_100H = {
    "frontend_conf": {"n_fft": 512, "win_length": 400, "hop_length": 160},
    "normalize": "global_mvn",
    "encoder_conf": {"output_size": 256, "attention_heads": 4, "linear_units": 1024, "num_blocks": 12,
                     "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1,
                     "input_layer": "conv2d", "normalize_before": True},
    "decoder_conf": {"attention_heads": 4, "linear_units": 2048, "num_blocks": 6, "dropout_rate": 0.1,
                     "positional_dropout_rate": 0.1, "self_attention_dropout_rate": 0.1,
                     "src_attention_dropout_rate": 0.1},
    "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False},
    "vocab": 5000,
}
FULL_960H = {
    "frontend_conf": {"n_fft": 512, "hop_length": 128},
    "normalize": "global_mvn",
    "encoder_conf": {"output_size": 512, "attention_heads": 8, "linear_units": 2048, "num_blocks": 18,
                     "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.0,
                     "input_layer": "conv2d6", "normalize_before": True},
    "decoder_conf": {"attention_heads": 8, "linear_units": 2048, "num_blocks": 6, "dropout_rate": 0.1,
                     "positional_dropout_rate": 0.1, "self_attention_dropout_rate": 0.0,
                     "src_attention_dropout_rate": 0.0},
    "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False},
    "vocab": 5000,
}


def _small(full: dict, d: int, heads: int, enc_ffn: int, dec_ffn: int, **enc) -> dict:
    c = copy.deepcopy(full)
    c["encoder_conf"].update(output_size=d, attention_heads=heads, linear_units=enc_ffn, num_blocks=2, **enc)
    c["decoder_conf"].update(attention_heads=heads, linear_units=dec_ffn, num_blocks=2)
    c.pop("vocab")
    return c


SMALL = {
    "small_100h": _small(FULL_100H, 32, 4, 48, 64),
    "small_960h": _small(FULL_960H, 32, 8, 64, 64),
    "trained_100h": _small(FULL_100H, 48, 4, 96, 192),
    "variant_conv2d8": _small(FULL_100H, 16, 2, 32, 32, input_layer="conv2d8"),
    "variant_linear": _small(FULL_100H, 16, 2, 32, 32, input_layer="linear"),
    "variant_uttmvn": {**_small(FULL_100H, 16, 2, 32, 32), "normalize": "utterance_mvn",
                       "normalize_conf": {"norm_means": True, "norm_vars": True}},
}


def log(msg: str) -> None:
    print(msg, flush=True)


# -------------------------------------------------------------------------------------------------
# Data


def data_root() -> Path:
    from conftest import find_data_root

    root = find_data_root()
    if root is None:
        sys.exit("real speech not found: set ASR_TEST_DATA or place shared/data beside the repository")
    return root


def librispeech_utterances(root: Path) -> list[dict]:
    """Every utterance (id, path relative to root, text, samples), shortest first."""
    utts = []
    for trans in sorted((root / "LibriSpeech").glob("*/*/*/*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(" ", 1)
            path = trans.parent / f"{uid}.flac"
            utts.append({"id": uid, "path": str(path.relative_to(root)), "text": text.strip(),
                         "samples": sf.info(str(path)).frames})
    return sorted(utts, key=lambda u: (u["samples"], u["id"]))


def read_wav(root: Path, rel: str) -> torch.Tensor:
    wav, sr = sf.read(str(root / rel), dtype="float32")
    assert sr == 16000, rel
    return torch.from_numpy(wav)


def pad_batch(wavs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lens = torch.tensor([w.numel() for w in wavs])
    out = torch.zeros(len(wavs), int(lens.max()))
    for i, w in enumerate(wavs):
        out[i, : w.numel()] = w
    return out, lens


# -------------------------------------------------------------------------------------------------
# ESPnet: tokenizer, stats, model, saved in its layout


def quiet_espnet() -> None:
    logging.disable(logging.WARNING)
    os.environ.setdefault("NLTK_DATA", "/nonexistent")


def train_bpe(texts: list[str], vocab: int, out: Path) -> tuple[Path, list[str]]:
    """A SentencePiece unigram model as ESPnet's asr.sh trains it, and ESPnet's token list: its
    tokenize_text vocabulary (pieces by frequency in the text) with <blank>, <unk>, <sos/eos>."""
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=proto, vocab_size=vocab,
                                   model_type="unigram", character_coverage=1.0, input_sentence_size=100000000,
                                   normalization_rule_name="identity", minloglevel=2)  # identity: a 1 kB model
    (out / "bpe.model").write_bytes(proto.getvalue())
    from espnet2.text.build_tokenizer import build_tokenizer

    tok = build_tokenizer("bpe", bpemodel=str(out / "bpe.model"))
    counts = collections.Counter(t for text in texts for t in tok.text2tokens(text))
    # espnet2.bin.tokenize_text --write_vocabulary: sorted by count, most frequent first
    words = [w for w, _ in sorted(counts.items(), key=lambda x: -x[1])]
    tokens = ["<blank>", "<unk>"] + [w for w in words if w not in ("<blank>", "<unk>")] + ["<sos/eos>"]
    return out / "bpe.model", tokens


def espnet_args(conf: dict, tokens: list[str], stats_file: str, bpemodel: str):
    """ESPnet's full argument namespace (its parser's defaults) with this model's settings."""
    from espnet2.tasks.asr import ASRTask

    args = ASRTask.get_parser().parse_args([])
    args.token_list = tokens
    args.bpemodel = bpemodel
    args.token_type = "bpe"
    args.frontend = "default"
    args.frontend_conf = dict(conf["frontend_conf"])
    args.specaug = None
    args.normalize = conf["normalize"]
    args.normalize_conf = dict(conf.get("normalize_conf") or {})
    if args.normalize == "global_mvn":
        args.normalize_conf["stats_file"] = stats_file
    args.encoder = "transformer"
    args.encoder_conf = dict(conf["encoder_conf"])
    args.decoder = "transformer"
    args.decoder_conf = dict(conf["decoder_conf"])
    args.model = "espnet"
    args.model_conf = dict(conf["model_conf"])
    args.init = None
    return args


def collect_stats(conf: dict, wavs: list[torch.Tensor], path: Path) -> None:
    """feats_stats.npz (count, sum, sum_square) of ESPnet's frontend features, as its collect_stats writes."""
    from espnet2.asr.frontend.default import DefaultFrontend

    fe = DefaultFrontend(**conf["frontend_conf"]).eval()
    count, total, total_sq = 0, 0.0, 0.0
    with torch.no_grad():
        for w in wavs:
            f, _ = fe(w.unsqueeze(0), torch.tensor([w.numel()]))
            f = f[0].double().numpy()
            count += f.shape[0]
            total = total + f.sum(0)
            total_sq = total_sq + (f * f).sum(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, count=np.array(count), sum=total, sum_square=total_sq)


def build_espnet(args) -> torch.nn.Module:
    from espnet2.tasks.asr import ASRTask

    return ASRTask.build_model(copy.deepcopy(args))


def write_layout(model_dir: Path, args, model: torch.nn.Module) -> None:
    """config.yaml and weights in ESPnet's layout, paths in the config relative to ``model_dir``."""
    import yaml

    exp = model_dir / "exp" / "asr_train"
    exp.mkdir(parents=True, exist_ok=True)
    data = vars(copy.deepcopy(args))
    (exp / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    torch.save(model.state_dict(), exp / "valid.acc.ave.pth")


def make_model(name: str, conf: dict, root: Path, train_utts: list[dict]) -> Path:
    """Build (and for trained_* train) one model with ESPnet; write it in ESPnet's layout."""
    model_dir = OUT / name
    texts = [u["text"] for u in train_utts]
    bpe, tokens = train_bpe(texts, 60 if name.startswith("trained") else 50,
                            model_dir / "data" / "token_list" / "bpe_unigram")
    wavs = [read_wav(root, u["path"]) for u in train_utts]
    stats = model_dir / "exp" / "asr_stats" / "train" / "feats_stats.npz"
    collect_stats(conf, wavs, stats)
    args = espnet_args(conf, tokens, str(stats.relative_to(model_dir)), str(bpe.relative_to(model_dir)))
    cwd = os.getcwd()
    os.chdir(model_dir)  # ESPnet resolves the config's relative paths from the working directory
    try:
        torch.manual_seed(0)
        model = build_espnet(args)
        if name.startswith("trained"):
            train(model, wavs, texts, tokens, bpe)
    finally:
        os.chdir(cwd)
    write_layout(model_dir, args, model)
    return model_dir


def train(model, wavs, texts, tokens, bpe, steps: int = TRAIN_STEPS) -> None:
    """A few hundred Adam steps of ESPnet's own forward on batches of these utterances."""
    from espnet2.text.build_tokenizer import build_tokenizer
    from espnet2.text.token_id_converter import TokenIDConverter

    tok, conv = build_tokenizer("bpe", bpemodel=str(bpe)), TokenIDConverter(tokens)
    ids = [torch.tensor(conv.tokens2ids(tok.text2tokens(t))) for t in texts]
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    t0 = time.time()
    for step in range(steps):
        idx = torch.randperm(len(wavs), generator=g)[:8].tolist()
        speech, lens = pad_batch([wavs[i] for i in idx])
        text = torch.nn.utils.rnn.pad_sequence([ids[i] for i in idx], batch_first=True, padding_value=-1)
        text_lens = torch.tensor([ids[i].numel() for i in idx])
        loss, stats, _ = model(speech, lens, text, text_lens)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"  step {step}: loss {float(loss):.2f} acc {float(stats['acc']):.3f} ({time.time() - t0:.0f} s)")
    model.eval()


# -------------------------------------------------------------------------------------------------
# ESPnet's outputs


def espnet_outputs(model_dir: Path, root: Path, batch: list[dict], search: list[dict]) -> dict:
    """Everything ESPnet computes on this model (loaded from its layout, as Speech2Text loads it)."""
    from espnet.nets.pytorch_backend.transformer.add_sos_eos import add_sos_eos
    from espnet2.bin.asr_inference import Speech2Text
    from espnet2.tasks.asr import ASRTask
    from espnet2.text.build_tokenizer import build_tokenizer
    from espnet2.text.token_id_converter import TokenIDConverter

    cwd = os.getcwd()
    os.chdir(model_dir)
    try:
        exp = Path("exp/asr_train")
        model, args = ASRTask.build_model_from_file(exp / "config.yaml", exp / "valid.acc.ave.pth")
        model.eval()
        tok, conv = build_tokenizer("bpe", bpemodel=args.bpemodel), TokenIDConverter(args.token_list)
        speech, lens = pad_batch([read_wav(root, u["path"]) for u in batch])
        ids = [torch.tensor(conv.tokens2ids(tok.text2tokens(u["text"]))) for u in batch]
        text = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=-1)
        text_lens = torch.tensor([i.numel() for i in ids])
        out: dict = {"utts": [u["id"] for u in batch], "tokens": text, "token_lens": text_lens}
        with torch.no_grad():
            feats, feat_lens = model._extract_feats(speech, lens)
            out["feats"], out["feat_lens"] = feats.clone(), feat_lens.clone()
            enc, enc_lens = model.encode(speech, lens)
            out["enc"], out["enc_lens"] = enc, enc_lens
            out["ctc_logp"] = model.ctc.log_softmax(enc)
            ys_in, _ = add_sos_eos(text, model.sos, model.eos, model.ignore_id)
            out["dec_logits"], _ = model.decoder(enc, enc_lens, ys_in, text_lens + 1)
        model.zero_grad()
        loss, stats, _ = model(speech, lens, text, text_lens)
        loss.backward()
        out.update(loss=loss.detach(), loss_att=stats["loss_att"], loss_ctc=stats["loss_ctc"],
                   acc=torch.tensor(float(stats["acc"])))
        out["grads"] = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        hyps = {}
        for beam in (10, 20) if search else ():
            s2t = Speech2Text(str(exp / "config.yaml"), str(exp / "valid.acc.ave.pth"), beam_size=beam,
                              ctc_weight=0.3, lm_weight=0.0, penalty=0.0, nbest=1, maxlenratio=0.0, minlenratio=0.0)
            res = []
            for u in search:
                (text_, _, token_int, hyp), *_ = s2t(read_wav(root, u["path"]))
                res.append({"id": u["id"], "tokens": [int(t) for t in token_int], "score": float(hyp.score),
                            "text": text_})
            hyps[str(beam)] = res
        out["hyps"] = hyps
    finally:
        os.chdir(cwd)
    return out


def espnet_float64(model_dir: Path, feats, feat_lens, text, text_lens) -> dict:
    """ESPnet's model in float64 on given features (its frontend bypassed): the formulas, without rounding."""
    from espnet.nets.pytorch_backend.transformer.add_sos_eos import add_sos_eos
    from espnet2.tasks.asr import ASRTask

    cwd = os.getcwd()
    os.chdir(model_dir)
    try:
        exp = Path("exp/asr_train")
        model, _ = ASRTask.build_model_from_file(exp / "config.yaml", exp / "valid.acc.ave.pth")
    finally:
        os.chdir(cwd)
    model.frontend = None  # ESPnet then takes its input as features
    model.double().eval()
    ctc = model.ctc

    def ctc_loss_float64(th_pred, th_target, th_ilen, th_olen):
        """ESPnet's CTC.loss_fn (builtin, reduce) without its cast of the log-probabilities to float32."""
        th_pred = th_pred.log_softmax(2)
        return ctc.ctc_loss(th_pred, th_target, th_ilen, th_olen).sum() / th_pred.size(1)

    ctc.loss_fn = ctc_loss_float64
    out = {}
    with torch.no_grad():
        enc, enc_lens = model.encode(feats.double().clone(), feat_lens)  # its GlobalMVN works in place
        out.update(enc=enc, enc_lens=enc_lens, ctc_logp=model.ctc.log_softmax(enc))
        ys_in, _ = add_sos_eos(text, model.sos, model.eos, model.ignore_id)
        out["dec_logits"], _ = model.decoder(enc, enc_lens, ys_in, text_lens + 1)
    loss, stats, _ = model(feats.double().clone(), feat_lens, text, text_lens)
    loss.backward()
    out.update(loss=loss.detach(), loss_att=stats["loss_att"], loss_ctc=stats["loss_ctc"],
               acc=torch.tensor(float(stats["acc"])))
    out["grads"] = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    return out


def float64_reference(model_dir: Path, out: dict) -> dict:
    """ESPnet's losses and gradients in float64 on its own float32 features (the training test's
    reference: in float32 ESPnet's gradients are themselves 1e-5..1e-4 off its float64 ones, and
    that distance is kept too)."""
    import espnet_equivalence as eq

    r = espnet_float64(model_dir, out["feats"], out["feat_lens"], out["tokens"], out["token_lens"])
    own_total, own_worst, _ = eq._grad_errors(out["grads"], r["grads"])  # ESPnet float32 vs its float64
    return {"loss": r["loss"], "loss_att": r["loss_att"].double(), "loss_ctc": r["loss_ctc"].double(),
            "acc": r["acc"], "grads": {k: g.float() for k, g in r["grads"].items()},  # stored rounded: half the size
            "espnet_float32_gradients": torch.tensor(own_total),
            "espnet_float32_gradients_worst_tensor": torch.tensor(own_worst)}


def save_outputs(model_dir: Path, out: dict, name: str) -> None:
    """Kilobytes: features only where the frontend differs, float64 gradients only for the untrained models."""
    drop = {"hyps", "utts"} | ({"feats"} if name not in ("small_100h", "small_960h") else set())
    drop |= {"grads"}  # float32 gradients: only their float64 reference is kept
    tensors = {k: v for k, v in out.items() if k not in drop}
    torch.save(tensors, model_dir / "espnet_outputs.pt")
    meta = {"utts": out["utts"], "hyps": out["hyps"]}
    (model_dir / "espnet_outputs.json").write_text(json.dumps(meta, indent=1) + "\n")


def published_shapes() -> dict:
    """Parameter shapes of the two full-size published configurations, tensor by tensor, from ESPnet."""
    tokens = ["<blank>", "<unk>"] + [f"t{i}" for i in range(2, 4999)] + ["<sos/eos>"]
    out = {}
    for name, full in (("transformer_100h", FULL_100H), ("transformer_960h_e18", FULL_960H)):
        conf = {k: v for k, v in full.items() if k != "vocab"}
        args = espnet_args(conf, tokens[: full["vocab"] - 1] + ["<sos/eos>"], "", "")
        args.normalize = None  # needs a stats file; holds no parameters
        model = build_espnet(args)
        conf_for_asr = dict(vars(args), normalize=conf["normalize"])
        conf_for_asr["normalize_conf"] = {}
        conf_for_asr["token_list"] = args.token_list
        out[name] = {
            "espnet_config": {k: conf_for_asr[k] for k in ("frontend", "frontend_conf", "normalize", "encoder",
                                                           "encoder_conf", "decoder", "decoder_conf", "model_conf")},
            "vocab_size": full["vocab"],
            "parameters": {k: list(p.shape) for k, p in model.named_parameters()},
            "num_parameters": sum(p.numel() for p in model.parameters()),
        }
    return out


# -------------------------------------------------------------------------------------------------


def select(root: Path) -> tuple[list[dict], list[dict], list[dict]]:
    utts = librispeech_utterances(root)
    batch = utts[:N_BATCH]
    train_utts = utts[:N_TRAIN]
    search = utts[:N_SEARCH] + utts[N_TRAIN : N_TRAIN + N_SEARCH]  # seen in training and not
    return batch, search, train_utts


def generate(root: Path) -> None:
    batch, search, train_utts = select(root)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "utterances.json").write_text(json.dumps(
        {"batch": batch, "search": search, "train": train_utts}, indent=1) + "\n")
    for name, conf in SMALL.items():
        log(f"{name}: building with ESPnet")
        model_dir = make_model(name, conf, root, train_utts)
        out = espnet_outputs(model_dir, root, batch, search if name.startswith("trained") else [])
        if not name.startswith("trained"):
            out["float64"] = float64_reference(model_dir, out)
        save_outputs(model_dir, out, name)
    log("published configurations: parameter shapes")
    (OUT / "published_shapes.json").write_text(json.dumps(published_shapes(), indent=1) + "\n")


def check(root: Path) -> int:
    """Recompute ESPnet's outputs from the committed models; compare with the fixtures and with asr."""
    import espnet_equivalence as eq

    meta = json.loads((OUT / "utterances.json").read_text())
    worst = 0
    for name in SMALL:
        model_dir = OUT / name
        stored = eq.load_fixture(model_dir)
        fresh = espnet_outputs(model_dir, root, meta["batch"], meta["search"] if name.startswith("trained") else [])
        keys = [k for k in ("feats", "enc", "ctc_logp", "dec_logits") if k in stored]
        drift = max(float((fresh[k] - stored[k]).abs().max()) for k in keys)
        hyps_same = fresh["hyps"] == stored["hyps"]
        log(f"{name}: ESPnet now vs fixture: max |diff| {drift:.2e}, hypotheses {'equal' if hyps_same else 'DIFFER'}")
        esp64 = espnet_float64(model_dir, fresh["feats"], fresh["feat_lens"], fresh["tokens"], fresh["token_lens"])
        ours64 = eq.ours_on_features(model_dir, fresh["feats"], fresh["feat_lens"], fresh["tokens"].clamp_min(0),
                                     fresh["token_lens"])
        d64 = eq.max_differences(ours64, esp64, esp64["enc_lens"], fresh["token_lens"])
        log("  float64, same features: " + ", ".join(f"{k} {v:.1e}" for k, v in d64.items()))
        report = eq.compare(model_dir, root)
        for key, value in report.items():
            log(f"  asr vs ESPnet  {key:<28} {value}")
        worst = max(worst, int(not report["ok"]) + int(drift > 1e-5) + int(not hyps_same))
    shapes = eq.compare_published_shapes(json.loads((OUT / "published_shapes.json").read_text()))
    for key, value in shapes.items():
        log(f"published {key}: {value}")
    return 1 if worst else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="recompute with ESPnet and compare (fixtures and asr)")
    args = p.parse_args()
    torch.set_num_threads(1)
    quiet_espnet()
    root = data_root()
    if args.check:
        return check(root)
    generate(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
