#!/usr/bin/env python3
"""Does adaptation to an unseen FSDD speaker carry over to recordings it did not adapt on?

The recipe adapts on the test set it is scored on (transductive, run.sh --adapt). This tool splits the
held-out speaker's recordings by take: set A is built from takes 0-24, set B from takes 25-49 (no
recording in both), each as the recipe's test set is built (connected digits, same gaps and noise).
The model is adapted on A exactly as run.sh does it (decode A, asr pseudo-label, asr train from the
model, asr average --by last, decode A again for the next round), and B is decoded before and after:
B's gain is the part that carries to new recordings of the speaker.

    python recipes/fsdd/local/adapt_transfer.py --speaker jackson --model recipes/fsdd/exp/tts_jackson/avg5 \\
        --out /tmp/xfer_jackson [--rounds 2] [--decode-args "--ctc-weight 0.9 --speeds 1.0,1.1,1.2"]

Prints a table and a JSON line. The asr commands run with this interpreter's ``-m asr``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # recipes/fsdd/local/ -> the repository
ADAPT = ["--set", "train.epochs=10", "--set", "train.scheduler=constant", "--set", "train.lr=0.0005", "--set",
         "train.warmup_steps=0", "--set", "train.keep_best=0", "--set", 'data.dev=""']  # run.sh's adapt_sets


def build_sets(corpus: Path, speaker: str, out: Path, num: int, seed: int) -> dict[str, Path]:
    """test_a.jsonl (takes 0-24) and test_b.jsonl (takes 25-49) of ``speaker``, built as the recipe's test set."""
    from asr.corpora.fsdd import FsddOptions, _build, _Clips, _scan
    from asr.corpora.fsdd_corpus import find_recordings
    from asr.data.manifest import write_manifest

    takes = _scan(find_recordings(corpus)).get(speaker)
    if not takes:
        raise SystemExit(f"fsdd_adapt_transfer: no recordings of {speaker!r} in {corpus}")
    sets = {}
    for name, (lo, hi) in (("a", (0, 24)), ("b", (25, 49))):
        pool: dict[str, list] = defaultdict(list)
        for digit, take, path in takes:
            if lo <= take <= hi:
                pool[speaker].append((digit, path))
        wav = out / "wav" / name
        wav.mkdir(parents=True, exist_ok=True)
        records = _build(f"transfer-{name}", num, pool, FsddOptions(seed=seed), False, wav, _Clips(), False)
        sets[name] = out / f"test_{name}.jsonl"
        write_manifest(sets[name], records)
    return sets


def asr(*args: str, log: Path) -> None:
    with open(log, "a") as f:
        f.write("$ asr " + " ".join(map(shlex.quote, args)) + "\n")
        f.flush()
        subprocess.run([sys.executable, "-m", "asr", *args], check=True, stdout=f, stderr=subprocess.STDOUT)


def wer(ref: Path, hyp: Path, log: Path) -> float:
    js = hyp.with_suffix(".wer.json")
    asr("score", "--ref", str(ref), "--hyp", str(hyp), "--json-out", str(js), log=log)
    return json.loads(js.read_text())["wer"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, default=REPO / "corpus" / "fsdd")
    ap.add_argument("--speaker", required=True, help="the held-out speaker the model never heard")
    ap.add_argument("--model", type=Path, required=True, help="a model directory trained without him (avg5)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--num", type=int, default=300, help="utterances in each of A and B (the recipe's test set: 300)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--decode-args", default="", help="added to every asr decode (e.g. the current defaults)")
    args = ap.parse_args(argv)
    out, log = args.out, args.out / "log.txt"
    out.mkdir(parents=True, exist_ok=True)
    sets = build_sets(args.corpus_dir, args.speaker, out, args.num, args.seed)
    dec = shlex.split(args.decode_args)

    def decode(model: Path, name: str) -> Path:
        hyp = model / f"transfer_{name}" / "hyp.jsonl"
        hyp.parent.mkdir(parents=True, exist_ok=True)
        asr("decode", "--model", str(model), "--manifest", str(sets[name]), "--out", str(hyp), *dec, log=log)
        return hyp

    model = out / "model"  # a copy of the model's files (not the recipe's decodings and adaptations beside them)
    model.mkdir(exist_ok=True)
    for f in args.model.iterdir():
        if f.is_file():
            shutil.copy2(f, model)
    rows = {"a": [], "b": []}
    for r in range(args.rounds + 1):
        hyp_a = decode(model, "a")
        rows["a"].append(wer(sets["a"], hyp_a, log))
        rows["b"].append(wer(sets["b"], decode(model, "b"), log))
        if r == args.rounds:
            break
        pseudo = model / "transfer_a" / "pseudo.jsonl"
        asr("pseudo-label", "--manifest", str(sets["a"]), "--hyp", str(hyp_a), "--out", str(pseudo), log=log)
        asr("train", "--config", str(model / "config.yaml"), "--out", str(model / "adapt"), "--set",
            f"train.init={model}", "--set", f"data.train={pseudo}", "--set", f"data.tokenizer={model}", "--set",
            f"data.cmvn={model / 'cmvn.json'}", "--set", "train.keep_last=5", *ADAPT, log=log)  # fmt: skip
        asr("average", "--exp", str(model / "adapt"), "--num", "5", "--by", "last", "--out",
            str(model / "adapt" / "avg5"), log=log)  # fmt: skip
        model = model / "adapt" / "avg5"
    print(f"| {args.speaker}, rounds | " + " | ".join(str(r) for r in range(args.rounds + 1)) + " |")
    print("|---|" + "---|" * (args.rounds + 1))
    print("| A (adapted on: takes 0-24) | " + " | ".join(f"{w:.2f}" for w in rows["a"]) + " |")
    print("| B (never adapted on: takes 25-49) | " + " | ".join(f"{w:.2f}" for w in rows["b"]) + " |")
    print(json.dumps({"speaker": args.speaker, "model": str(args.model), "wer_a": rows["a"], "wer_b": rows["b"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
