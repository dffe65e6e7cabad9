"""The recipes run every stage for real (LibriSpeech on ../shared/data, FSDD on the bundled corpus/fsdd),
and a finished stage is never redone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _copy_recipe(tmp: Path, name: str) -> Path:
    """A private copy of recipes/<name> (outputs land beside run.sh) that uses this repo's configs and tools."""
    (tmp / "recipes").mkdir()
    outputs = shutil.ignore_patterns("data", "data_*", "exp", "downloads")  # a previous run's, not the recipe's
    shutil.copytree(REPO / "recipes" / name, tmp / "recipes" / name, ignore=outputs)
    shutil.copy(REPO / "recipes" / "stages.sh", tmp / "recipes" / "stages.sh")
    for d in ("configs", "tools", "corpus"):
        (tmp / d).symlink_to(REPO / d)
    return tmp / "recipes" / name


def _run(script: Path, *args: str, timeout: int = 900, fail: bool = False, offline: bool = False) -> str:
    """stdout of ``bash script args`` (stdout + stderr when ``fail``: it must then fail).

    ``offline``: HTTP(S) goes to a proxy where nothing listens, so any download would fail."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if offline:
        env.update(dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"), "http://127.0.0.1:9"))
        env.update(no_proxy="", NO_PROXY="")
    proc = subprocess.run(
        ["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=script.parent
    )
    if fail:
        assert proc.returncode != 0, f"{script.name} succeeded:\n{proc.stdout[-3000:]}"
        return proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _assert_outputs_ignored(recipe: Path) -> None:
    """Everything a run wrote beside run.sh is ignored by the repository's .gitignore: the main job, run in
    a clone, leaves ``git status`` clean."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: .gitignore not checked")
    git = ["git", "-C", str(REPO)]
    tracked = subprocess.run([*git, "ls-files", f"recipes/{recipe.name}"], capture_output=True, text=True, check=True)
    own = {str(Path(f).relative_to(f"recipes/{recipe.name}")) for f in tracked.stdout.split()}
    own |= {str(parent) for f in list(own) for parent in Path(f).parents if str(parent) != "."}  # tracked folders
    made = [f"recipes/{recipe.name}/{p.relative_to(recipe)}" + "/" * p.is_dir()
            for p in sorted(recipe.rglob("*")) if str(p.relative_to(recipe)) not in own]  # fmt: skip
    assert made, "the run wrote nothing?"
    proc = subprocess.run([*git, "check-ignore", "--no-index", "--stdin"], input="\n".join(made) + "\n",
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr  # 1: nothing ignored
    ignored = set(proc.stdout.splitlines())
    kept = [p for p in made if p not in ignored]
    assert not kept, f"outputs of the recipe that git would show as untracked: {kept[:10]}"


@pytest.mark.slow
def test_librispeech_recipe_all_stages_and_restart(data_root, tmp_path):
    recipe = _copy_recipe(tmp_path, "librispeech")
    args = [
        "--corpus-dir", str(data_root), "--train-set", "test-other", "--dev-set", "dev-clean",
        "--test-sets", "dev-clean test-clean", "--config", str(REPO / "configs" / "tiny.yaml"), "--ngpu", "0",
        "--vocab-size", "100", "--num-avg", "3", "--exp", "tiny", "--set", "train.epochs=5",
    ]
    out = _run(recipe / "run.sh", *args)
    for n in range(8):
        assert f"stage {n} (" in out, f"stage {n} did not run:\n{out}"
    exp = recipe / "exp" / "tiny"
    results = (exp / "RESULTS.md").read_text()
    for s in ("dev-clean", "test-clean"):
        wer = json.loads((exp / "avg3" / f"decode_{s}" / "wer.json").read_text())
        assert wer["words"] == {"dev-clean": 88, "test-clean": 88}[s] and wer["sentences"] in (3, 5)
        assert f"| {s} | **{wer['wer']:.2f}** |" in results
    assert "Training time:" in results and "Hardware:" in results and "beam 10, CTC weight 0.3" in results
    assert (exp / "logs" / "stage4.train.log").is_file()
    assert (recipe / "data" / "logs" / "stage1.manifests.log").is_file()
    for f in ("config.yaml", "tokenizer.model", "cmvn.json", "model.pt"):
        assert (exp / "avg3" / f).is_file(), f"avg3 is not a model directory: {f} missing"

    # Rerunning does no work: every stage is skipped and nothing is rewritten.
    model = exp / "avg3" / "model.pt"
    before = model.stat().st_mtime_ns
    again = _run(recipe / "run.sh", *args, timeout=120)
    assert again.count("done before, skipped") >= 10, again
    assert "finished in" not in again
    assert model.stat().st_mtime_ns == before
    # --force redoes the stages asked for, and only those.
    forced = _run(recipe / "run.sh", *args, "--stage", "7", "--stop-stage", "7", "--force", timeout=120)
    assert forced.count("stage 7 (score_") == 4 and "stage 6" not in forced  # "running" + "finished" per set


@pytest.mark.slow
def test_librispeech_recipe_fine_tunes_a_whisper(data_root, tmp_path):
    """--whisper: the random English-only Whisper of tests/fixtures/whisper (its Hugging Face form) imported,
    fine-tuned two steps with configs/librispeech/whisper_finetune.yaml on the shared LibriSpeech
    utterances, averaged, decoded jointly with its new CTC head under Whisper's rules, scored."""
    pytest.importorskip("tokenizers", reason="the 'whisper' extra: pip install 'asr[whisper]'")
    recipe = _copy_recipe(tmp_path, "librispeech")
    hf = REPO / "tests" / "fixtures" / "whisper" / "en" / "hf"
    args = [
        "--corpus-dir", str(data_root), "--train-set", "test-other", "--dev-set", "dev-clean",
        "--test-sets", "test-clean", "--ngpu", "0", "--whisper", str(hf), "--num-avg", "1",
        "--set", "train.max_steps=2", "--set", "data.num_workers=0", "--set", "data.max_frames=4000",
        "--set", "train.dev_wer=false",
    ]  # fmt: skip
    out = _run(recipe / "run.sh", *args)
    for n in (0, 1, 3, 4, 5, 6, 7):
        assert f"stage {n} (" in out, f"stage {n} did not run:\n{out}"
    assert "stage 2 (" not in out  # no CMVN statistics: Whisper's log-mel is used as trained
    exp = recipe / "exp" / "whisper_hf_test-other"
    cfg = yaml.safe_load((exp / "avg1" / "config.yaml").read_text())
    assert cfg["model"]["ctc_head"] and cfg["model"]["ctc_blank_bias"] == 11 and cfg["decode"]["rules"] == "whisper"
    assert (exp / "avg1" / "tokenizer.json").is_file() and (recipe / "exp" / "hf" / "model.pt").is_file()
    results = (exp / "RESULTS.md").read_text()
    wer = json.loads((exp / "avg1" / "decode_test-clean" / "wer.json").read_text())
    assert f"| test-clean | **{wer['wer']:.2f}** |" in results and wer["sentences"] == 5
    assert "beam 5, CTC weight 0.3" in results


@pytest.mark.slow
def test_fsdd_recipe_stages_0_to_3_offline_on_the_bundled_corpus(tmp_path):
    """A fresh clone without internet: the bundled recordings are checked and used; a tampered one is named."""
    recipe = _copy_recipe(tmp_path, "fsdd")
    small = ["--num-train", "20", "--num-dev", "4", "--num-test", "4", "--vocab-size", "20"]
    out = _run(recipe / "run.sh", *small, "--stop-stage", "3", offline=True, timeout=600)  # 100 voices: ~40 s
    for n in range(4):
        assert f"stage {n} (" in out, f"stage {n} did not run:\n{out}"
    assert "stage 4" not in out
    log = (recipe / "data" / "logs" / "stage0.corpus.log").read_text()
    assert "recordings: 2500 files match SHA256SUMS" in log
    digits = (recipe / "data" / "digits_test.jsonl").read_text()
    assert f'"{tmp_path}/corpus/fsdd/recordings/0_yweweler_0.flac"' in digits
    assert (recipe / "data" / "tokenizer" / "tokenizer.model").is_file() and (recipe / "data" / "cmvn.json").is_file()
    assert not (recipe / "downloads").exists()
    assert len(list((recipe / "data_tts_voices").glob("*_tts099_14.flac"))) == 10  # 100 synthetic speakers, offline
    train = [json.loads(line)["speaker"] for line in (recipe / "data" / "train.jsonl").read_text().splitlines()]
    assert any(s.startswith("tts") for s in train) and not all(s.startswith("tts") for s in train)
    _assert_outputs_ignored(recipe)

    tampered = shutil.copytree(REPO / "corpus" / "fsdd", tmp_path / "tampered", symlinks=False)
    f = tampered / "recordings" / "4_nicolas_12.flac"
    f.write_bytes(f.read_bytes()[:-1])
    out = _run(recipe / "run.sh", "--corpus-dir", str(tampered), "--data", "data_t", *small, "--stop-stage", "3",
               offline=True, timeout=120, fail=True)  # fmt: skip
    assert f"{tampered}/recordings/4_nicolas_12.flac: SHA-256" in out
    assert not (recipe / "data_t" / "train.jsonl").exists()  # stopped at stage 0


@pytest.mark.slow
def test_fsdd_recipe_plumbing(tmp_path):
    """Every stage of the connected-digit recipe on a small slice (the full run is in the README)."""
    recipe = _copy_recipe(tmp_path, "fsdd")
    out = _run(
        recipe / "run.sh", "--num-train", "40", "--num-dev", "8", "--num-test", "8", "--vocab-size", "20",
        "--tts-voices", "2", "--set", "train.epochs=1", "--num-avg", "1", "--beam-size", "3",
        "--adapt-set", "train.epochs=2",
    )  # fmt: skip
    for n in range(9):
        assert f"stage {n} (" in out, f"stage {n} did not run:\n{out}"
    results = (recipe / "exp" / "transformer" / "RESULTS.md").read_text()
    assert "| test |" in results and "| test CTC only |" in results  # the joint search, and CTC alone beside it
    # Two rounds of adaptation to the test speaker (the default): each fine-tunes the model before it on that
    # model's own hypotheses of the test set, and the table shows the last.
    model = recipe / "exp" / "transformer" / "avg1"
    for rnd, src in enumerate((model, model / "adapt" / "avg1"), 1):
        pseudo = [json.loads(line) for line in (src / "decode_test" / "pseudo.jsonl").read_text().splitlines()]
        hyps = [json.loads(line) for line in (src / "decode_test" / "hyp.jsonl").read_text().splitlines()]
        assert pseudo and all(r["text"] == {h["id"]: h["text"] for h in hyps}[r["id"]] for r in pseudo)
        adapt_cfg = yaml.safe_load((src / "adapt" / "config.yaml").read_text())
        assert adapt_cfg["train"]["init"] == str(src.relative_to(recipe)) and adapt_cfg["data"]["dev"] == ""
        log = (recipe / "exp" / "transformer" / "logs" / f"stage6.adapt{rnd}.log").read_text()
        assert f"initialised from {src.relative_to(recipe)}" in log and "done: 2 epochs" in log
    for folder, label in (("decode", "test adapted"), ("decode_ctc", "test adapted, CTC only")):
        wer = json.loads((model / "adapt" / "avg1" / "adapt" / "avg1" / f"{folder}_test" / "wer.json").read_text())
        assert f"| {label} | **{wer['wer']:.2f}** |" in results
    assert "2 round(s) of fine-tuning" in results
    assert not (model / "adapt" / "avg1" / "decode_ctc_test").exists()  # a round before the last: joint search only
    assert "| dev adapted" not in results
    played = ", audio played at 1x, 1.1x, 1.2x and combined on hypotheses (decode.speeds)"  # the config's, in both
    assert f"attention, beam 3, CTC weight 0.9{played}" in results  # the config's decoding with the command line's beam
    assert f"ctc_beam, beam 3{played}: the same model without its decoder" in results
    for folder, label in (("decode", "test"), ("decode_ctc", "test CTC only")):
        decoded = recipe / "exp" / "transformer" / "avg1" / f"{folder}_test"
        wer = json.loads((decoded / "wer.json").read_text())
        assert f"| {label} | **{wer['wer']:.2f}** |" in results
        assert json.loads((decoded / "hyp.settings.json").read_text())["decode"]["speeds"] == [1.0, 1.1, 1.2]
    assert "reference:" in out
    _assert_outputs_ignored(recipe)


@pytest.mark.slow
def test_fsdd_loso_two_speakers_one_table(tmp_path):
    """loso.sh: the recipe once per held-out speaker (its own data and experiment), then one table;
    --jobs 2: two at a time, and a failed run is named without stopping the others."""
    recipe = _copy_recipe(tmp_path, "fsdd")
    tiny = ["--num-train", "24", "--num-dev", "4", "--num-test", "6", "--vocab-size", "20", "--tts-voices", "2",
            "--set", "train.epochs=1", "--num-avg", "1", "--beam-size", "2", "--seed", "3"]  # fmt: skip
    _run(recipe / "loso.sh", "--speakers", "george lucas", "--jobs", "2", *tiny)
    for spk in ("george", "lucas"):
        data = recipe / f"data_transformer_{spk}"
        test = [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines()]
        assert test and {r["speaker"] for r in test} == {spk}  # held out: the only test speaker...
        train = (data / "train.jsonl").read_text()
        assert f'"speaker": "{spk}"' not in train  # ...and never trained on
        assert (recipe / "exp" / f"transformer_{spk}" / "avg1" / "decode_test" / "wer.json").is_file()
        assert "seed: 3" in (recipe / "exp" / f"transformer_{spk}" / "config.yaml").read_text()  # --seed: training too
    table = (recipe / "exp" / "transformer_loso.md").read_text()
    assert "| george |" in table and "| lucas |" in table and "over 2 speakers" in table and "worst" in table
    assert "test WER %, CTC only |" in table and "Test WER, CTC only: mean" in table
    assert "test WER %, adapted |" in table and "Test WER, adapted: mean" in table  # run.sh --adapt 2, the default
    twice = recipe / "exp" / "transformer_lucas" / "avg1" / "adapt" / "avg1" / "adapt" / "avg1"
    assert (twice / "decode_test" / "wer.json").is_file()
    assert "stage 4 (train): finished" in (recipe / "exp" / "transformer_lucas.log").read_text()
    (recipe / "exp" / "transformer_loso.md").unlink()
    out = _run(recipe / "loso.sh", "--speakers", "nobody george", "--jobs", "2", *tiny, fail=True)
    assert "holding out nobody failed" in out and "no table written" in out
    assert "stage 4 (train): done before, skipped" in (recipe / "exp" / "transformer_george.log").read_text()
    assert not (recipe / "exp" / "transformer_loso.md").exists()
