"""Language models: config, training with the ASR's own loop (resume, averaging), perplexity, the CLI.

Real text: the transcripts of the LibriSpeech utterances in ../shared/data, a char tokenizer, LMs
of a few thousand parameters; every run takes a second or two.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers_decode import librispeech_records, make_model_dir
from test_prepare import http_server  # noqa: F401 (a fixture: the local HTTP server with Range support)

from asr.checkpoint import safe_load
from asr.config import ConfigError
from asr.inference import load_model
from asr.lm import load_lm, load_lm_config
from asr.lm.task import LMTask
from asr.training.train import LOG_FILE, train

REPO = Path(__file__).resolve().parents[1]
SMALL_LM = {
    "transformer": {"type": "transformer", "d_model": 64, "heads": 4, "ffn_dim": 128, "layers": 2, "dropout": 0.1},
    "lstm": {"type": "lstm", "d_model": 64, "layers": 2, "dropout": 0.1},
}


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "asr", *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def text(data_root, tmp_path_factory) -> dict[str, Path]:
    """Transcripts in a text file (50 sentences) and a manifest (8, the dev set); an ASR model directory
    (tiny, random weights) whose char tokenizer the LMs share."""
    d = tmp_path_factory.mktemp("lmtext")
    recs = librispeech_records(data_root)
    (d / "train.txt").write_text("".join(r["text"] + "\n" for r in recs[:50]))
    (d / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[50:]))
    model_dir = make_model_dir(d, data_root)
    return {"dir": d, "train": d / "train.txt", "dev": d / "dev.jsonl", "asr": model_dir}


def lm_config(path: Path, text, kind: str = "transformer", **train_cfg) -> Path:
    cfg = {
        "lm": SMALL_LM[kind],
        "data": {"train": [str(text["train"])], "dev": [str(text["dev"])], "tokenizer": str(text["asr"]),
                 "max_tokens": 3000, "max_sentences": 16},
        "train": {"epochs": 3, "lr": 0.003, "warmup_steps": 5, "log_interval": 1, "checkpoint_interval": 0,
                  "precision": "fp32", "seed": 1, **train_cfg},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_config_names_bad_keys(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"lm": {"type": "gru"}}))
    with pytest.raises(ConfigError, match="lm.type: expected 'transformer' or 'lstm', got 'gru'"):
        load_lm_config(p)
    p.write_text(yaml.safe_dump({"lm": {"layerz": 2}}))
    with pytest.raises(ConfigError, match="lm.layerz: unknown key"):
        load_lm_config(p)
    p.write_text(yaml.safe_dump({"model": {}}))
    with pytest.raises(ConfigError, match="an LM config has an 'lm' section"):
        load_lm_config(p)
    assert load_lm_config(Path(__file__).parents[1] / "configs" / "librispeech" / "lm_transformer.yaml").lm.layers > 1


@pytest.mark.parametrize("kind", ["transformer", "lstm"])
def test_lm_trains_with_the_shared_loop(text, tmp_path, kind):
    cfg = load_lm_config(lm_config(tmp_path / "c.yaml", text, kind))
    exp = tmp_path / "exp"
    summary = train(cfg, exp, task=LMTask(cfg))
    assert summary["epoch"] == 3 and summary["step"] > 3
    dev = [json.loads(line) for line in (exp / LOG_FILE).read_text().splitlines()]
    ppl = [r["dev_ppl"] for r in dev if r["kind"] == "dev"]
    assert len(ppl) == 3 and ppl[-1] < ppl[0] < 40, ppl  # a char LM: perplexity per token falls well below 40 ids
    lm = load_lm(exp)
    assert type(lm.model).__name__ == {"transformer": "TransformerLM", "lstm": "LSTMLM"}[kind]
    assert lm.vocab_size == load_model(text["asr"]).model.vocab_size
    # asr lm eval on the dev manifest = the dev perplexity the run logged (same text, same normalisation)
    r = run_cli(["lm", "eval", "--model", str(exp), "--text", str(text["dev"]), "--json"])
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["ppl_token"] == pytest.approx(ppl[-1], rel=1e-4)
    assert got["sentences"] == 8 and got["ppl_word"] > got["ppl_token"]
    # with int8 products (the LM --quantize-lm fuses): close to the LM's own perplexity
    r = run_cli(["lm", "eval", "--model", str(exp), "--text", str(text["dev"]), "--json", "--quantize"])
    assert r.returncode == 0, r.stderr[-2000:]
    int8 = json.loads(r.stdout)
    assert int8["quantized"] and int8["ppl_token"] == pytest.approx(got["ppl_token"], rel=0.02)
    # asr average on an LM run writes an LM directory
    r = run_cli(["average", "--exp", str(exp), "--num", "2", "--by", "last", "--out", str(tmp_path / "avg")])
    assert r.returncode == 0, r.stderr[-2000:]
    avg = load_lm(tmp_path / "avg")
    last2 = [safe_load(exp / "checkpoints" / f"epoch_{e}.pt")["model"] for e in (2, 3)]
    key = "embed.weight"
    assert torch.allclose(avg.model.state_dict()[key], (last2[0]["lm." + key] + last2[1]["lm." + key]) / 2)


def test_lm_resume_is_exact(text, tmp_path):
    """One run of 3 epochs == a run stopped after 1 epoch and continued (dropout on: RNG state matters)."""
    full = load_lm_config(lm_config(tmp_path / "a.yaml", text))
    train(full, tmp_path / "full", task=LMTask(full))
    part = load_lm_config(lm_config(tmp_path / "b.yaml", text, epochs=1))
    train(part, tmp_path / "part", task=LMTask(part))
    rest = load_lm_config(lm_config(tmp_path / "b.yaml", text))
    summary = train(rest, tmp_path / "part", task=LMTask(rest))
    assert summary["epoch"] == 3
    a, b = safe_load(tmp_path / "full" / "model.pt"), safe_load(tmp_path / "part" / "model.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_decode_and_transcribe_with_lm_and_vocabulary_check(text, tmp_path, data_root):
    cfg = lm_config(tmp_path / "c.yaml", text)
    r = run_cli(["lm", "train", "--config", str(cfg), "--out", str(tmp_path / "lm"), "--set", "train.epochs=1"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "LM directory" in r.stdout
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in librispeech_records(data_root)[:3]))
    out = tmp_path / "hyp.jsonl"
    r = run_cli(["decode", "--model", str(text["asr"]), "--manifest", str(manifest), "--out", str(out),
                 "--lm", str(tmp_path / "lm"), "--lm-weight", "0.5", "--beam-size", "2", "--num-workers", "0"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "lm_weight 0.5" in r.stdout and len(out.read_text().splitlines()) == 3
    assert json.loads(out.with_suffix(".settings.json").read_text())["decode"]["lm_weight"] == 0.5
    r = run_cli(["decode", "--model", str(text["asr"]), "--manifest", str(manifest), "--out", str(out), "--quantize-lm",
                 "--lm", str(tmp_path / "lm"), "--lm-weight", "0.5", "--beam-size", "2", "--num-workers", "0"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(out.with_suffix(".settings.json").read_text())["decode"]["quantize_lm"] is True
    flac = librispeech_records(data_root)[0]["audio"]
    r = run_cli(["transcribe", flac, "--model", str(text["asr"]), "--lm", str(tmp_path / "lm"), "--lm-weight", "0.5",
                 "--beam-size", "2"])  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    # --lm-weight without an LM is an error, not a silent no-op
    r = run_cli(["transcribe", flac, "--model", str(text["asr"]), "--lm-weight", "0.5"])
    assert r.returncode == 2 and "no LM to fuse" in r.stderr
    # the model directory names a default LM (decode.lm, relative to the model directory)
    model_cfg = yaml.safe_load((text["asr"] / "config.yaml").read_text())
    model_cfg["decode"].update(lm=os.path.relpath(tmp_path / "lm", text["asr"]), lm_weight=0.3)
    own = tmp_path / "asr_with_lm"
    own.mkdir()
    for name in ("model.pt", "tokenizer.model"):
        (own / name).write_bytes((text["asr"] / name).read_bytes())
    model_cfg["decode"]["lm"] = os.path.relpath(tmp_path / "lm", own)
    (own / "config.yaml").write_text(yaml.safe_dump(model_cfg))
    rec = load_model(own)
    assert rec.lm is not None and rec.lm.path == own / model_cfg["decode"]["lm"]
    # an LM over another tokenizer: a clear error naming both sizes and both tokenizer files
    from asr.text import Tokenizer, normalize

    texts = [normalize(x["text"]) for x in librispeech_records(data_root)[:5]]
    other = Tokenizer.train(texts, tmp_path / "other_tok", None, "char")
    assert other.vocab_size != rec.model.vocab_size
    r = run_cli(["lm", "train", "--config", str(cfg), "--out", str(tmp_path / "lm2"), "--tokenizer",
                 str(tmp_path / "other_tok"), "--set", "train.epochs=1"])  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli(["decode", "--model", str(text["asr"]), "--manifest", str(manifest), "--out", str(out),
                 "--lm", str(tmp_path / "lm2"), "--lm-weight", "0.5"])  # fmt: skip
    assert r.returncode == 2
    msg = r.stderr
    assert f"vocabulary of {other.vocab_size} ids" in msg and f"has {rec.model.vocab_size}" in msg, msg
    assert str(tmp_path / "lm2" / "tokenizer.model") in msg and str(text["asr"] / "tokenizer.model") in msg, msg


# ----------------------------------------------------------------------------- the LibriSpeech LM corpus
def test_lm_corpus_download_resumes_and_checks_md5(tmp_path, http_server):  # noqa: F811 (the imported fixture)
    """librispeech-lm-norm.txt.gz through the audio's fetch: cut off, resumed, MD5-checked, not fetched twice."""
    import gzip
    import hashlib

    from asr.cli import main
    from asr.corpora.download import DownloadError
    from asr.corpora.librispeech import LM_TEXT, LM_TEXT_MD5, download_librispeech_lm

    state, url = http_server
    body = gzip.compress("".join(f"SENTENCE NUMBER {i} OF THE BOOK\n" for i in range(5000)).encode())
    (state.root / LM_TEXT).write_bytes(body)
    md5 = hashlib.md5(body).hexdigest()
    state.cut_after = len(body) // 3
    got = download_librispeech_lm(tmp_path / "c", url, md5=md5, progress=False)
    assert got.read_bytes() == body
    assert [r for _, r in state.requests] == [None, f"bytes={len(body) // 3}-"]  # resumed where it was cut
    n = len(state.requests)
    assert main(["download", "librispeech-lm", "--corpus-dir", str(tmp_path / "c"), "--mirror", url,
                 "--md5", md5]) == 0  # fmt: skip
    assert len(state.requests) == n  # already there and checked: nothing fetched
    with pytest.raises(DownloadError, match=f"MD5 mismatch \\(expected {LM_TEXT_MD5}"):
        download_librispeech_lm(tmp_path / "d", url, progress=False)  # not OpenSLR's file
    assert not (tmp_path / "d" / LM_TEXT).exists()


@pytest.mark.slow
def test_librispeech_recipe_lm_stages(data_root, tmp_path):
    """run.sh --lm: LM training on the corpus text plus the training transcripts, dev/test perplexity,
    decoding with the LM; RESULTS.md shows every set without and with it. (The download stage is
    tested above against a local server; here the corpus text is given with --lm-text.)"""
    from test_recipes import _copy_recipe, _run

    recipe = _copy_recipe(tmp_path, "librispeech")
    corpus_text = tmp_path / "lm-corpus.txt"
    corpus_text.write_text("".join(r["text"] + "\n" for r in librispeech_records(data_root)))
    lm_yaml = tmp_path / "lm_tiny.yaml"
    lm_yaml.write_text(yaml.safe_dump({"lm": SMALL_LM["transformer"], "data": {"max_tokens": 4000},
                                       "train": {"epochs": 2, "warmup_steps": 5, "precision": "fp32",
                                                 "dev_wer": False}}))  # fmt: skip
    args = [
        "--corpus-dir", str(data_root), "--train-set", "test-other", "--dev-set", "dev-clean",
        "--test-sets", "dev-clean test-clean", "--config", str(REPO / "configs" / "tiny.yaml"), "--ngpu", "0",
        "--vocab-size", "100", "--num-avg", "1", "--exp", "tiny", "--set", "train.epochs=2",
        "--lm", "--lm-config", str(lm_yaml), "--lm-text", str(corpus_text), "--lm-weight", "0.5",
    ]  # fmt: skip
    out = _run(recipe / "run.sh", *args)
    assert "stage 8" not in out  # --lm-text: nothing to download
    for n in (9, 10, 11, 12):
        assert f"stage {n} (" in out, f"stage {n} did not run:\n{out}"
    lmdir = recipe / "exp" / "lm_tiny_test-other"
    assert load_lm(lmdir).vocab_size == load_model(recipe / "exp" / "tiny" / "avg1").model.vocab_size
    results = (recipe / "exp" / "tiny" / "RESULTS.md").read_text()
    for s in ("dev-clean", "test-clean"):
        wer = json.loads((recipe / "exp" / "tiny" / "avg1" / f"decode_lm_{s}" / "wer.json").read_text())
        assert f"| {s} + LM | **{wer['wer']:.2f}** |" in results and f"| {s} | **" in results
        ppl = json.loads((lmdir / f"ppl_{s}.json").read_text())
        assert f"{s}: perplexity {ppl['ppl_token']:.2f} per token" in results
    assert "LM weight 0.5" in results
