"""ESPnet's own outputs for small language models, as test fixtures for ``asr import espnet`` (LMs).

Runs in tools/peers/.venv (ESPnet installed; see tools/peers/setup.sh). ESPnet's own code builds
each LM (``LMTask.build_model`` from its argument namespace), trains it for a few hundred steps on
the transcripts of the LibriSpeech utterances in ../shared/data (so its outputs are peaked and
fusion changes the search), and saves it in ESPnet's layout (``exp/lm_train/config.yaml``,
``exp/lm_train/valid.loss.ave.pth``). The token list and BPE model are the ``trained_100h`` ASR
fixture's (tests/fixtures/espnet, written by tests/make_espnet_fixtures.py), so the LMs fuse with it.
ESPnet then computes:

    log_probs       log-softmax of the LM's full forward on [sos] + y for each transcript  (U + 1, V)
    step_log_probs  the same, one token at a time through ``batch_score`` and its states   (U + 1, V)
    hyps            (transformer LM only) Speech2Text's best hypothesis and score with the trained_100h
                    ASR model and this LM: beam 10, CTC weight 0.3, lm_weight 0.6, one utterance at a time

LMs (tests/fixtures/espnet_lm/<name>/):

    transformer     TransformerLM as ESPnet's LibriSpeech recipes configure it (pos_enc none, an
                    embedding smaller than att_unit), small
    seq_rnn         SequentialRNNLM (LSTM, unit != nhid), small

    tools/peers/.venv/bin/python tests/make_espnet_lm_fixtures.py [--only transformer|seq_rnn]
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import torch
import yaml
from make_espnet_fixtures import data_root, librispeech_utterances, quiet_espnet, read_wav

ROOT = Path(__file__).resolve().parents[1]

ASR_FIXTURE = ROOT / "tests" / "fixtures" / "espnet" / "trained_100h"
OUT = ROOT / "tests" / "fixtures" / "espnet_lm"
LMS = {
    "transformer": ("transformer", {"pos_enc": None, "embed_unit": 24, "att_unit": 32, "head": 4, "unit": 64,
                                    "layer": 2, "dropout_rate": 0.0}),
    "seq_rnn": ("seq_rnn", {"unit": 24, "nhid": 32, "nlayers": 2, "rnn_type": "lstm", "dropout_rate": 0.0}),
}
STEPS = 300


def espnet_lm(kind: str, conf: dict, tokens: list[str], bpemodel: str):
    from espnet2.tasks.lm import LMTask

    args = LMTask.get_parser().parse_args([])
    args.token_list, args.bpemodel, args.token_type = tokens, bpemodel, "bpe"
    args.lm, args.lm_conf = kind, dict(conf)
    args.model, args.model_conf = "lm", {}
    args.init = None
    return LMTask.build_model(copy.deepcopy(args)), args


def token_ids(texts: list[str], tokens: list[str], bpemodel: str) -> list[list[int]]:
    from espnet2.text.build_tokenizer import build_tokenizer
    from espnet2.text.token_id_converter import TokenIDConverter

    tok, conv = build_tokenizer("bpe", bpemodel=bpemodel), TokenIDConverter(tokens)
    return [conv.tokens2ids(tok.text2tokens(t)) for t in texts]


def train(model, ids: list[list[int]]) -> None:
    """A few hundred Adam steps of ESPnet's own LM loss on the transcripts (batches of 8)."""
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for step in range(STEPS):
        pick = torch.randperm(len(ids), generator=g)[:8].tolist()
        seqs = [torch.tensor(ids[i]) for i in pick]
        text = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
        loss, stats, _ = model(text, torch.tensor([s.numel() for s in seqs]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"  step {step}: loss {float(loss.detach()):.3f}", flush=True)
    model.eval()


@torch.no_grad()
def log_probs(model, ids: list[list[int]], eos: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """ESPnet's full-forward and step-by-step (``batch_score``) log-probabilities of [sos] + y."""
    full, steps = [], []
    for y in ids:
        x = torch.tensor([[eos, *y]])
        logits, _ = model.lm(x, None)
        full.append(torch.log_softmax(logits[0], dim=-1))
        states, rows = [None], []
        for t in range(x.shape[1]):
            lp, states = model.lm.batch_score(x[:, : t + 1], states, None)
            rows.append(lp[0])
        steps.append(torch.stack(rows))
    return full, steps


def search(lm_dir: Path, root: Path, utts: list[dict]) -> list[dict]:
    from espnet2.bin.asr_inference import Speech2Text

    cwd = os.getcwd()
    os.chdir(ASR_FIXTURE)  # the ASR config's paths are relative to its folder
    try:
        s2t = Speech2Text("exp/asr_train/config.yaml", "exp/asr_train/valid.acc.ave.pth",
                          lm_train_config=str(lm_dir / "config.yaml"), lm_file=str(lm_dir / "valid.loss.ave.pth"),
                          beam_size=10, ctc_weight=0.3, lm_weight=0.6, penalty=0.0, nbest=1, maxlenratio=0.0,
                          minlenratio=0.0)  # fmt: skip
        out = []
        for u in utts:
            (text, _, token_int, hyp), *_ = s2t(read_wav(root, u["path"]))
            out.append({"id": u["id"], "tokens": [int(t) for t in token_int], "score": float(hyp.score),
                        "text": text})  # fmt: skip
        return out
    finally:
        os.chdir(cwd)


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=list(LMS), help="regenerate this LM's fixtures only")
    only = ap.parse_args().only
    quiet_espnet()
    root = data_root()
    asr_cfg = yaml.safe_load((ASR_FIXTURE / "exp" / "asr_train" / "config.yaml").read_text())
    tokens = asr_cfg["token_list"]
    bpe = ASR_FIXTURE / "data" / "token_list" / "bpe_unigram" / "bpe.model"
    texts = [u["text"] for u in librispeech_utterances(root)]
    ids = token_ids(texts, tokens, str(bpe))
    search_utts = json.loads((ROOT / "tests" / "fixtures" / "espnet" / "utterances.json").read_text())["search"]
    for name, (kind, conf) in LMS.items():
        if only and name != only:
            continue
        print(f"{name}: training ESPnet's {kind} LM for {STEPS} steps", flush=True)
        torch.manual_seed(0)
        model, args = espnet_lm(kind, conf, tokens, "data/token_list/bpe_unigram/bpe.model")
        train(model, ids)
        d = OUT / name
        exp = d / "exp" / "lm_train"
        exp.mkdir(parents=True, exist_ok=True)
        (d / "data" / "token_list" / "bpe_unigram").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bpe, d / "data" / "token_list" / "bpe_unigram" / "bpe.model")
        (exp / "config.yaml").write_text(yaml.safe_dump(vars(copy.deepcopy(args)), sort_keys=False,
                                                        allow_unicode=True))  # fmt: skip
        torch.save(model.state_dict(), exp / "valid.loss.ave.pth")
        sel = ids[:: max(1, len(ids) // 12)][:12]  # 12 transcripts of all lengths
        full, steps = log_probs(model, sel, len(tokens) - 1)
        torch.save({"log_probs": full, "step_log_probs": steps}, d / "espnet_lm_outputs.pt")
        worst = max(float((a - b).abs().max()) for a, b in zip(full, steps, strict=True))
        meta = {"tokens": sel, "espnet_step_vs_full_max": worst}
        if name == "transformer":
            meta["hyps"] = search(exp.resolve(), root, search_utts)
        (d / "espnet_lm_outputs.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"  wrote {d}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
