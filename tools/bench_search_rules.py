"""The search's two rule sets (``decode.rules``: asr, espnet) side by side: what each finds and what it costs.

Three works, each decoded by both rule sets in one process, alternating within each repetition:

  flat    the ESPnet fixtures of models that are unsure (tests/fixtures/espnet_flat: a briefly trained
          and an untrained ESPnet Transformer, with and without a small LM; 20 LibriSpeech
          utterances): per setting, how many best hypotheses equal Speech2Text's, how many of the
          others score lower than ESPnet's best (a search error of that rule set: the model and
          weights are the same) or higher, and the time of one batched decode of the 20
  fsdd    a trained FSDD model (``--fsdd-model``, e.g. recipes/fsdd/exp/transformer/avg1 after the
          main job) on the FSDD test manifest, with the model's own decoding settings: WER and time
  100h    the 100 h model (random weights, vocabulary 500, conv2d) on 16 random 10 s utterances,
          beam 10, CTC 0.3, every output 30 tokens long (as tools/bench_decode.py): time

    .venv/bin/python tools/bench_search_rules.py --works flat,100h
    .venv/bin/python tools/bench_search_rules.py --works fsdd --fsdd-model recipes/fsdd/exp/transformer/avg1

Prints a table per work and one JSON line; every time is a median of ``--reps`` runs after one untimed
run, the two rule sets taking turns within each repetition.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import REPO, data_root, machine, model_100h, print_table, read_wav

RULES = ("asr", "espnet")
FLAT = REPO / "tests" / "fixtures" / "espnet_flat"
SCORE_TOL = 1e-4


def _alternating(fns: dict, reps: int) -> dict:
    """{name: (median seconds, last result)} of each function, after one untimed call of each, the
    functions taking turns within each repetition (so that background load hits all alike)."""
    out = {name: fn() for name, fn in fns.items()}
    times: dict = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(times[name]), out[name]) for name in fns}


def _same(ours, theirs: dict, eos: int) -> bool:
    """Speech2Text's hypothesis: its token list ends with a first eos where it chose eos at its last
    step (it appends one more there); otherwise token for token."""
    t = theirs["tokens"]
    return ours.tokens == t or (bool(t) and t[-1] == eos and ours.tokens == t[:-1])


def _settings(r: dict, rules: str):
    from asr.config import DecodeConfig

    return DecodeConfig(beam_size=r["beam"], ctc_weight=r["ctc_weight"], length_bonus=0.0, lm_weight=r["lm_weight"],
                        rules=rules, max_len_ratio=0.0 if rules == "espnet" else 1.0)  # fmt: skip


def flat(reps: int) -> tuple[list[list[str]], dict]:
    from asr.checkpoint import MODEL_FILE, safe_load
    from asr.config import load_config
    from asr.decode import recognize
    from asr.features.espnet import espnet_log_mel
    from asr.importers import import_espnet
    from asr.importers.espnet_lm import import_espnet_lm
    from asr.lm import load_lm
    from asr.model import ASRModel

    search = json.loads((FLAT / "search.json").read_text())
    root = data_root()
    wavs = [read_wav(root / u["path"]) for u in search["utterances"]]
    models, rows, out = {}, [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted({r["model"] for r in search["results"]}):
            d = import_espnet(Path(tmp) / name, FLAT / name)
            cfg = load_config(d / "config.yaml")
            model = ASRModel(cfg.model)
            model.load_state_dict(safe_load(d / MODEL_FILE))
            dc = cfg.data
            feats = [espnet_log_mel(w[None], torch.tensor([w.numel()]), dc.sample_rate, dc.n_fft, dc.win_length,
                                    dc.hop_length, dc.num_mel_bins) for w in wavs]  # fmt: skip
            lens = torch.cat([n for _, n in feats])
            batch = torch.zeros(len(feats), int(lens.max()), feats[0][0].shape[-1])
            for i, (f, n) in enumerate(feats):
                batch[i, : int(n[0])] = f[0, : int(n[0])]
            models[name] = (model.eval(), batch, lens)
        lm = load_lm(import_espnet_lm(Path(tmp) / "lm", FLAT / "lm")).model
    for r in search["results"]:
        model, batch, lens = models[r["model"]]
        row = [r["model"], str(r["beam"]), str(r["ctc_weight"]), str(r["lm_weight"])]
        key = f"{r['model']}-b{r['beam']}-c{r['ctc_weight']}-lm{r['lm_weight']}"
        out[key] = {}
        runs = _alternating({rules: (lambda rules=rules: recognize(model, batch, lens, _settings(r, rules), lm=lm))  # noqa: B023
                             for rules in RULES}, reps)  # fmt: skip
        for rules in RULES:
            secs, hyps = runs[rules]
            pairs = list(zip(hyps, r["hyps"], strict=True))
            apart = [(o, t) for o, t in pairs if not _same(o, t, model.eos_id)]
            same = len(pairs) - len(apart)
            lower = sum(o.score < t["score"] for o, t in apart)
            higher = sum(o.score > t["score"] for o, t in apart)
            row += [f"{same}/{len(pairs)}", str(lower), str(higher), f"{secs:.2f}"]
            out[key][rules] = {"same": same, "lower": lower, "higher": higher, "seconds": round(secs, 3)}
        row.append(f"{out[key]['espnet']['seconds'] / out[key]['asr']['seconds']:.2f}")
        rows.append(row)
    return rows, out


def fsdd(model_dir: Path, manifest: Path, reps: int) -> tuple[list[list[str]], dict]:
    from asr.data.manifest import read_manifest
    from asr.inference import load_model
    from asr.inference.decode_manifest import decode_manifest
    from asr.scoring import score

    rec = load_model(model_dir)
    records = read_manifest(manifest)
    refs = {r["id"]: r["text"] for r in records}
    rows, out = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        hyp_path = Path(tmp) / "hyp.jsonl"
        def run(rules):
            ratio = 0.0 if rules == "espnet" else rec.config.decode.max_len_ratio
            cfg = rec.config.decode.updated(rules=rules, max_len_ratio=ratio)
            decode_manifest(rec, records, hyp_path, cfg, num_workers=0, progress=False)
            return {json.loads(x)["id"]: json.loads(x)["text"] for x in hyp_path.read_text().splitlines()}

        runs = _alternating({rules: (lambda rules=rules: run(rules)) for rules in RULES}, reps)
        for rules in RULES:
            secs, hyps = runs[rules]
            wer = score(refs, hyps, bootstrap=0).wer  # in percent
            out[rules] = {"wer": round(wer, 2), "seconds": round(secs, 2)}
            rows.append([rules, f"{wer:.2f}", f"{secs:.1f}"])
    return rows, out


def bench_100h(reps: int) -> tuple[list[list[str]], dict]:
    from asr.decode.beam_search import beam_search

    torch.manual_seed(0)
    model = model_100h("conv2d").eval()
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(16, 1000, 80, generator=g)
    lens = torch.full((16,), 1000)
    rows, out = [], {}
    with torch.inference_mode():
        memory, mem_lens = model.encode(feats, lens)
        runs = _alternating({rules: (lambda rules=rules: beam_search(
            model, memory, mem_lens, beam_size=10, ctc_weight=0.3, max_len=30, min_len=30, rules=rules))
            for rules in RULES}, reps)  # fmt: skip
        for rules in RULES:
            secs = runs[rules][0]
            out[rules] = {"seconds": round(secs, 3)}
            rows.append([rules, f"{secs:.2f}"])
    return rows, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--works", default="flat,100h", help="comma-separated: flat, fsdd, 100h")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--fsdd-model", type=Path, help="a trained FSDD model directory (for the fsdd work)")
    p.add_argument("--fsdd-manifest", type=Path, default=REPO / "recipes" / "fsdd" / "data" / "test.jsonl")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    works = args.works.split(",")
    result: dict = {"machine": machine(), "threads": args.threads}
    print(f"{machine()}, {args.threads} threads, medians of {args.reps}")
    if "flat" in works:
        rows, result["flat"] = flat(args.reps)
        head = ["model", "beam", "CTC", "LM"] + [f"{r} {c}" for r in RULES for c in ("=S2T", "lower", "higher", "s")]
        title = "Unsure ESPnet models, 20 LibriSpeech utterances: against Speech2Text's best"
        print_table(title, head + ["espnet/asr"], rows)
    if "fsdd" in works:
        if args.fsdd_model is None:
            raise SystemExit("--works fsdd needs --fsdd-model DIR (a trained FSDD model directory)")
        rows, result["fsdd"] = fsdd(args.fsdd_model, args.fsdd_manifest, args.reps)
        print_table(f"FSDD test set, {args.fsdd_model}", ["rules", "WER %", "s"], rows)
    if "100h" in works:
        rows, result["100h"] = bench_100h(args.reps)
        print_table("100 h model, 16 x 10 s, beam 10, CTC 0.3, 30 tokens each (batched)", ["rules", "s"], rows)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
