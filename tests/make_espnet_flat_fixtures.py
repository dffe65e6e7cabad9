"""ESPnet's own searches on models that are unsure (flat outputs), as fixtures for ``asr import espnet``.

Runs in tools/peers/.venv (ESPnet installed; see tools/peers/setup.sh). Where a model's outputs are
peaked every reasonable search finds the same hypothesis; where they are flat the search's rules
(which candidates get CTC scores, which continue, when it stops) decide. These fixtures hold what
ESPnet's Speech2Text finds there. ESPnet's own code builds every model (``ASRTask.build_model``,
``LMTask.build_model``) and trains it (the helpers of tests/make_espnet_fixtures.py and
tests/make_espnet_lm_fixtures.py); each is saved in ESPnet's on-disk layout, as those fixtures are.

The configuration is none of tests/fixtures/espnet's: the 100 h STFT (512/400/160) with global_mvn,
a ``conv2d6`` input layer, d_model 48, 3 encoder blocks of 4 heads and FFN 128, 2 decoder blocks of
6 heads and FFN 96 (the decoder's heads and FFN differ from the encoder's), CTC 0.3, lsm 0.1, and a
150-piece unigram BPE model (trained on all 58 transcripts, so every decoded text has its pieces).

Utterances: the 58 LibriSpeech utterances of ../shared/data (or $ASR_TEST_DATA), shortest first;
every third one (20, from the shortest to the longest, 19.9 s) is decoded, the other 38 are the
training data (the models never saw a decoded utterance or its transcript).

tests/fixtures/espnet_flat/:

    brief/      the configuration trained by ESPnet's own forward for 500 Adam steps (batches of 8) on the
                38 training utterances: its outputs on the 20 decoded ones are flat (search.json's
                "flatness": mean max probability of the decoder's teacher-forced softmax 0.38, of CTC
                per frame 0.72); its hypotheses are mostly wrong words, of about the right length
    random/     the same configuration untrained: brief's initial weights (seed 0); decoder 0.027, CTC
                0.024: its hypotheses run to about the maximum length (encoder frames)
    lm/         a small ESPnet TransformerLM (pos_enc none, embed 32, att 48, 4 heads, FFN 96, 2 layers)
                over the same token list, trained for 300 steps on the 38 training transcripts (0.56 on
                the 20 decoded transcripts)
    search.json {"utterances": [{"id", "path" (relative to the data root), "text", "frames" (encoder
                frames: ESPnet's maximum length with maxlenratio 0)}],
                 "results": [{"model", "beam", "ctc_weight", "lm_weight", "seconds" (ESPnet's decode
                 time for the 20), "hyps": [{"id", "tokens" (Speech2Text's token_int), "score",
                 "text", "seconds", "nbest": [[tokens, score]] x 3}]}], "flatness", "settings", ...}

Searches: Speech2Text, one utterance at a time, fp32 on the CPU, nbest 3, penalty 0, maxlenratio 0,
minlenratio 0; beam 10 and 20, CTC weight 0.3 and 0.5, without an LM and with lm/ at LM_WEIGHT
(0.3): the full cross product, for both models (16 settings x 20 utterances: ESPnet takes about
5 minutes on one thread, 9 to 31 s a setting). Two of ESPnet's ways show in them: a hypothesis
still running at the maximum length (``frames`` tokens) ends there without an eos score, and one
whose eos comes at that last step gets a second eos, so its ``tokens`` end with the eos id.

    tools/peers/.venv/bin/python tests/make_espnet_flat_fixtures.py             # everything
    tools/peers/.venv/bin/python tests/make_espnet_flat_fixtures.py --probe     # time the longest utterance
    tools/peers/.venv/bin/python tests/make_espnet_flat_fixtures.py --search-only   # models kept, searches redone
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import yaml
from make_espnet_fixtures import (
    FULL_100H,
    build_espnet,
    collect_stats,
    data_root,
    espnet_args,
    librispeech_utterances,
    quiet_espnet,
    read_wav,
    train,
    train_bpe,
    write_layout,
)
from make_espnet_lm_fixtures import STEPS as LM_STEPS
from make_espnet_lm_fixtures import espnet_lm, token_ids
from make_espnet_lm_fixtures import train as train_lm

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "espnet_flat"
BPE_DIR = Path("data") / "token_list" / "bpe_unigram"
STATS = Path("exp") / "asr_stats" / "train" / "feats_stats.npz"
ASR_EXP = Path("exp") / "asr_train"
LM_EXP = Path("exp") / "lm_train"

# the published 100 h layout (frontend, global_mvn, pre-norm, dropouts, CTC 0.3, lsm 0.1) at other sizes:
# conv2d6, decoder heads and FFN other than the encoder's
CONF = {k: copy.deepcopy(v) for k, v in FULL_100H.items() if k != "vocab"}
CONF["encoder_conf"].update(output_size=48, attention_heads=4, linear_units=128, num_blocks=3, input_layer="conv2d6")
CONF["decoder_conf"].update(attention_heads=6, linear_units=96, num_blocks=2)
LM_CONF = {"pos_enc": None, "embed_unit": 32, "att_unit": 48, "head": 4, "unit": 96, "layer": 2, "dropout_rate": 0.0}
VOCAB = 150  # SentencePiece pieces
BRIEF_STEPS = 500
LM_WEIGHT = 0.3
NBEST = 3
MODELS = ("brief", "random")
BEAMS = (10, 20)
CTC_WEIGHTS = (0.3, 0.5)
LM_WEIGHTS = (0.0, LM_WEIGHT)


def log(msg: str) -> None:
    print(msg, flush=True)


def split(root: Path) -> tuple[list[dict], list[dict]]:
    """(20 decoded utterances: every third, shortest to longest; the 38 others, for training)."""
    utts = librispeech_utterances(root)
    decoded = utts[::3]
    assert len(decoded) == 20 and decoded[-1] is utts[-1], "expected 58 utterances: every third, the longest last"
    chosen = {u["id"] for u in decoded}
    return decoded, [u for u in utts if u["id"] not in chosen]


# -------------------------------------------------------------------------------------------------
# Models in ESPnet's layout


def make_models(root: Path, decoded: list[dict], train_utts: list[dict]) -> None:
    all_texts = [u["text"] for u in train_utts + decoded]
    if OUT.exists():
        for name in (*MODELS, "lm"):
            shutil.rmtree(OUT / name, ignore_errors=True)
    bpe, tokens = train_bpe(all_texts, VOCAB, OUT / "brief" / BPE_DIR)
    wavs = [read_wav(root, u["path"]) for u in train_utts]
    texts = [u["text"] for u in train_utts]
    collect_stats(CONF, wavs, OUT / "brief" / STATS)
    args = espnet_args(CONF, tokens, str(STATS), str(BPE_DIR / "bpe.model"))
    for name in MODELS:
        model_dir = OUT / name
        if name != "brief":
            for rel in (BPE_DIR / "bpe.model", STATS):
                (model_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(OUT / "brief" / rel, model_dir / rel)
        cwd = os.getcwd()
        os.chdir(model_dir)  # ESPnet resolves the config's relative paths from the working directory
        try:
            torch.manual_seed(0)  # random/ is brief/'s initialisation
            model = build_espnet(args)
            if name == "brief":
                log(f"brief: training for {BRIEF_STEPS} steps on {len(wavs)} utterances")
                t0 = time.time()
                train(model, wavs, texts, tokens, bpe, steps=BRIEF_STEPS)
                log(f"  {time.time() - t0:.0f} s")
            model.eval()
        finally:
            os.chdir(cwd)
        write_layout(model_dir, args, model)
        log(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, {len(tokens)} tokens")

    log(f"lm: training ESPnet's transformer LM for {LM_STEPS} steps on the {len(texts)} training transcripts")
    torch.manual_seed(0)
    lm, lm_args = espnet_lm("transformer", LM_CONF, tokens, str(BPE_DIR / "bpe.model"))
    train_lm(lm, token_ids(texts, tokens, str(bpe)))
    d = OUT / "lm"
    (d / BPE_DIR).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bpe, d / BPE_DIR / "bpe.model")
    (d / LM_EXP).mkdir(parents=True, exist_ok=True)
    data = vars(copy.deepcopy(lm_args))
    (d / LM_EXP / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    torch.save(lm.state_dict(), d / LM_EXP / "valid.loss.ave.pth")


# -------------------------------------------------------------------------------------------------
# How flat: ESPnet's own forward on the decoded utterances


@torch.no_grad()
def flatness(root: Path, decoded: list[dict]) -> tuple[dict, list[int]]:
    """Mean max probability (over every position of the 20) of the decoder's teacher-forced softmax
    (targets y + eos), of CTC (frames) and of the LM (y + eos); and each utterance's encoder frames."""
    from espnet.nets.pytorch_backend.transformer.add_sos_eos import add_sos_eos
    from espnet2.tasks.asr import ASRTask
    from espnet2.tasks.lm import LMTask

    out: dict = {}
    frames: list[int] = []
    tokens = yaml.safe_load((OUT / "brief" / ASR_EXP / "config.yaml").read_text())["token_list"]
    ids = token_ids([u["text"] for u in decoded], tokens, str(OUT / "brief" / BPE_DIR / "bpe.model"))
    for name in MODELS:
        cwd = os.getcwd()
        os.chdir(OUT / name)
        try:
            model, _ = ASRTask.build_model_from_file(ASR_EXP / "config.yaml", ASR_EXP / "valid.acc.ave.pth")
        finally:
            os.chdir(cwd)
        model.eval()
        dec_max, ctc_max, frames = [], [], []
        for u, y in zip(decoded, ids, strict=True):
            wav = read_wav(root, u["path"])
            enc, enc_lens = model.encode(wav.unsqueeze(0), torch.tensor([wav.numel()]))
            frames.append(int(enc_lens[0]))
            ctc_max.append(model.ctc.softmax(enc)[0].max(-1).values)
            text = torch.tensor([y])
            ys_in, _ = add_sos_eos(text, model.sos, model.eos, model.ignore_id)
            logits, _ = model.decoder(enc, enc_lens, ys_in, torch.tensor([len(y) + 1]))
            dec_max.append(logits[0].softmax(-1).max(-1).values)
        out[name] = {"decoder_teacher_forced": float(torch.cat(dec_max).mean()),
                     "ctc_frames": float(torch.cat(ctc_max).mean())}  # fmt: skip
    lm_exp = OUT / "lm" / LM_EXP
    lm, _ = LMTask.build_model_from_file(lm_exp / "config.yaml", lm_exp / "valid.loss.ave.pth")
    lm.eval()
    eos = len(tokens) - 1
    lm_max = [lm.lm(torch.tensor([[eos, *y]]), None)[0][0].softmax(-1).max(-1).values for y in ids]
    out["lm"] = {"teacher_forced": float(torch.cat(lm_max).mean())}
    return out, frames


# -------------------------------------------------------------------------------------------------
# Speech2Text


def decode(model: str, beam: int, ctc_weight: float, lm_weight: float, root: Path, utts: list[dict]) -> list[dict]:
    """Speech2Text's n-best for each utterance, one at a time, and its time."""
    from espnet2.bin.asr_inference import Speech2Text

    lm = {}
    if lm_weight:
        lm_exp = (OUT / "lm" / LM_EXP).resolve()
        lm = {"lm_train_config": str(lm_exp / "config.yaml"), "lm_file": str(lm_exp / "valid.loss.ave.pth")}
    wavs = [read_wav(root, u["path"]) for u in utts]
    cwd = os.getcwd()
    os.chdir(OUT / model)  # the ASR config's paths (stats, BPE model: read when first used) are relative to it
    try:
        s2t = Speech2Text(str(ASR_EXP / "config.yaml"), str(ASR_EXP / "valid.acc.ave.pth"), device="cpu",
                          dtype="float32", batch_size=1, beam_size=beam, ctc_weight=ctc_weight,
                          lm_weight=lm_weight, penalty=0.0, nbest=NBEST, maxlenratio=0.0, minlenratio=0.0,
                          **lm)  # fmt: skip
        timed = []
        for wav in wavs:
            t0 = time.perf_counter()
            results = s2t(wav)
            timed.append((results, time.perf_counter() - t0))
    finally:
        os.chdir(cwd)
    out = []
    for u, (results, dt) in zip(utts, timed, strict=True):
        text, _, token_int, hyp = results[0]
        nbest = [[[int(t) for t in ti], float(h.score)] for _, _, ti, h in results]
        out.append({"id": u["id"], "tokens": [int(t) for t in token_int], "score": float(hyp.score),
                    "text": text, "seconds": round(dt, 3), "nbest": nbest})  # fmt: skip
    return out


def settings() -> list[tuple[str, int, float, float]]:
    return [(m, b, c, w) for m in MODELS for b in BEAMS for c in CTC_WEIGHTS for w in LM_WEIGHTS]


def probe(root: Path, decoded: list[dict]) -> None:
    """Speech2Text's time on the longest utterance (beam 10 and 20, CTC 0.3, no LM) and an estimate of
    the cross product from it (each setting as if all 20 utterances cost in proportion to frames^2)."""
    longest = decoded[-1]
    _, frames = flatness(root, decoded)
    share = sum(f * f for f in frames) / frames[-1] ** 2  # the 20's cost in units of the longest's
    total = 0.0
    for model in MODELS:
        for beam in BEAMS:
            (h,) = decode(model, beam, 0.3, 0.0, root, [longest])
            est = h["seconds"] * share * len(CTC_WEIGHTS) * len(LM_WEIGHTS)
            total += est
            log(f"{model} beam {beam}: {h['seconds']:.1f} s for {longest['id']} ({frames[-1]} frames), "
                f"{len(h['tokens'])} tokens, score {h['score']:.3f}; x{share:.1f} for the 20 at 4 settings: "
                f"~{est:.0f} s")  # fmt: skip
    log(f"estimated cross product: ~{total / 60:.1f} min")


def search(root: Path, decoded: list[dict], train_utts: list[dict]) -> None:
    flat, frames = flatness(root, decoded)
    log("flatness (mean max probability): " + json.dumps(flat))
    results = []
    t_all = time.time()
    for model, beam, ctc_weight, lm_weight in settings():
        hyps = decode(model, beam, ctc_weight, lm_weight, root, decoded)
        seconds = round(sum(h["seconds"] for h in hyps), 2)
        results.append({"model": model, "beam": beam, "ctc_weight": ctc_weight, "lm_weight": lm_weight,
                        "seconds": seconds, "hyps": hyps})  # fmt: skip
        at_max = sum(len(h["tokens"]) == f for h, f in zip(hyps, frames, strict=True))
        log(f"{model} beam {beam} ctc {ctc_weight} lm {lm_weight}: {seconds:.1f} s "
            f"(longest {hyps[-1]['seconds']:.1f} s), {at_max} best hypotheses at the maximum length")  # fmt: skip
    log(f"all searches: {time.time() - t_all:.0f} s")
    utts = [{"id": u["id"], "path": u["path"], "text": u["text"], "frames": f}
            for u, f in zip(decoded, frames, strict=True)]  # fmt: skip
    meta = {
        "utterances": utts,
        "train": [u["id"] for u in train_utts],
        "brief_steps": BRIEF_STEPS,
        "lm_steps": LM_STEPS,
        "flatness": flat,
        "settings": {"nbest": NBEST, "penalty": 0.0, "maxlenratio": 0.0, "minlenratio": 0.0, "batch_size": 1,
                     "dtype": "float32", "device": "cpu", "lm_weight": LM_WEIGHT, "torch_threads": 1},
        "results": results,
    }  # fmt: skip
    (OUT / "search.json").write_text(dump(meta))


def dump(meta: dict) -> str:
    """search.json indented, but each hypothesis on one line (kilobytes, where indent=1 takes a megabyte)."""
    head = json.dumps({k: v for k, v in meta.items() if k != "results"}, indent=1)
    parts = []
    for r in meta["results"]:
        setting = json.dumps({k: v for k, v in r.items() if k != "hyps"})[:-1]
        hyps = ",\n".join("   " + json.dumps(h, separators=(",", ":")) for h in r["hyps"])
        parts.append(f'  {setting}, "hyps": [\n{hyps}\n  ]}}')
    results = ",\n".join(parts)
    text = f'{head[:-2]},\n "results": [\n{results}\n ]\n}}\n'
    assert json.loads(text) == json.loads(json.dumps(meta))
    return text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--probe", action="store_true", help="time the longest utterance only (models made if missing)")
    p.add_argument("--search-only", action="store_true", help="keep the models on disk, redo the searches")
    args = p.parse_args()
    torch.set_num_threads(1)
    quiet_espnet()
    root = data_root()
    decoded, train_utts = split(root)
    have = all((OUT / m / ASR_EXP / "valid.acc.ave.pth").exists() for m in MODELS)
    if not (have and (args.probe or args.search_only)):
        make_models(root, decoded, train_utts)
    if args.probe:
        probe(root, decoded)
        return 0
    search(root, decoded, train_utts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
