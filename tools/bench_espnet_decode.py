"""Decoding speed: ``asr`` on an imported ESPnet model against ESPnet's own Speech2Text on that model.

Runs in tools/peers/.venv (ESPnet installed). Both decode the same LibriSpeech utterances from
../shared/data (or $ASR_TEST_DATA) with the same settings: beam 10, CTC weight 0.3, no LM, no
length bonus, fp32 on CPU with ``--threads`` threads (2 by default). Speech2Text decodes one
utterance at a time (as it does); ``asr`` decodes them in batches (``--batch``, 1 for the same
regime). Features are included on both sides. Prints a table and one JSON line, and how many
best hypotheses agree.

    tools/peers/.venv/bin/python tools/bench_espnet_decode.py                      # the trained fixture model
    tools/peers/.venv/bin/python tools/bench_espnet_decode.py --espnet-dir espnet_100h --utts 20
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import REPO, data_root, librispeech_utterances, read_wav


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--espnet-dir", default=str(REPO / "tests" / "fixtures" / "espnet" / "trained_100h"),
                   help="an ESPnet model folder (exp/*/config.yaml, *.pth, ...); default: the trained fixture")
    p.add_argument("--utts", type=int, default=12, help="LibriSpeech utterances, shortest first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--ctc-weight", type=float, default=0.3)
    p.add_argument("--batch", type=int, default=8, help="utterances per asr batch")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)

    from espnet2.bin.asr_inference import Speech2Text

    from asr.config import DecodeConfig
    from asr.data.dataset import collate
    from asr.decode import recognize
    from asr.features import compute_features
    from asr.importers import import_espnet
    from asr.importers.espnet import find_espnet_files
    from asr.inference import load_model

    root = data_root()
    utts = librispeech_utterances(root)[: args.utts]
    wavs = [read_wav(root / u["path"]) for u in utts]
    audio_s = sum(w.numel() for w in wavs) / 16000

    files = find_espnet_files(args.espnet_dir)
    cwd = os.getcwd()
    os.chdir(args.espnet_dir)  # ESPnet resolves the config's paths from here
    try:
        s2t = Speech2Text(str(files.config.resolve()), str(files.weights.resolve()), beam_size=args.beam,
                          ctc_weight=args.ctc_weight, lm_weight=0.0, penalty=0.0, nbest=1, maxlenratio=0.0)
        s2t(wavs[0])  # warm-up
        t0 = time.perf_counter()
        theirs = [s2t(w)[0] for w in wavs]
        t_espnet = time.perf_counter() - t0
    finally:
        os.chdir(cwd)

    with tempfile.TemporaryDirectory() as tmp:
        rec = load_model(import_espnet(Path(tmp) / "m", args.espnet_dir))
    model, cfg = rec.model, rec.config
    dcfg = DecodeConfig(beam_size=args.beam, ctc_weight=args.ctc_weight, length_bonus=0.0, max_len_ratio=1.0)

    def decode_all() -> list:
        out = []
        for i in range(0, len(wavs), args.batch):
            chunk = wavs[i : i + args.batch]
            feats = compute_features(chunk, cfg.data)
            batch = collate([{"id": str(j), "feats": f, "tokens": torch.zeros(0, dtype=torch.long), "duration": 0.0}
                             for j, f in enumerate(feats)])
            hyps = recognize(model, batch.feats, batch.feat_lens, dcfg)
            order = {int(u): h for u, h in zip(batch.ids, hyps, strict=True)}
            out += [order[j] for j in range(len(chunk))]
        return out

    decode_all()  # warm-up
    t0 = time.perf_counter()
    ours = decode_all()
    t_asr = time.perf_counter() - t0
    same = sum(list(o.tokens) == [int(t) for t in th[2]] for o, th in zip(ours, theirs, strict=True))

    print(f"{len(wavs)} utterances, {audio_s:.1f} s of audio, beam {args.beam}, CTC {args.ctc_weight}, "
          f"{args.threads} threads; same best hypothesis: {same}/{len(wavs)}")
    print(f"{'system':<32}{'seconds':>10}{'RTF':>10}")
    print(f"{'ESPnet Speech2Text (1 by 1)':<32}{t_espnet:>10.2f}{t_espnet / audio_s:>10.4f}")
    print(f"{f'asr decode (batch {args.batch})':<32}{t_asr:>10.2f}{t_asr / audio_s:>10.4f}")
    print(json.dumps({"utts": len(wavs), "audio_s": round(audio_s, 2), "beam": args.beam, "threads": args.threads,
                      "espnet_s": round(t_espnet, 3), "asr_s": round(t_asr, 3), "asr_batch": args.batch,
                      "same_best": same, "model": str(args.espnet_dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
