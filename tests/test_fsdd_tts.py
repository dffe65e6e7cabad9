"""Synthetic FSDD speakers (asr.corpora.fsdd_tts, espeak-ng) and their place in asr prepare fsdd."""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.cli import main
from asr.corpora.fsdd import BUNDLED_FSDD, FsddOptions, prepare_fsdd
from asr.corpora.fsdd_tts import TtsOptions, synthesize_voices
from asr.corpora.librispeech import PrepareError
from asr.data.manifest import read_manifest

SMALL = dict(num_train=40, num_dev=6, num_test=6)


@pytest.fixture(scope="module")
def voices(tmp_path_factory) -> Path:
    return synthesize_voices(tmp_path_factory.mktemp("tts") / "voices", TtsOptions(voices=2, takes=3))


def test_voices_are_fsdd_takes_reproducible_and_reused(voices, tmp_path) -> None:
    files = sorted(voices.glob("*.flac"))
    assert [p.name for p in files[:3]] == ["0_tts000_5.flac", "0_tts000_6.flac", "0_tts000_7.flac"]
    assert len(files) == 2 * 10 * 3 and {p.name.split("_")[1] for p in files} == {"tts000", "tts001"}
    for p in files:
        x, rate = sf.read(str(p))
        assert rate == 8000 and 0.15 < x.size / rate < 1.5  # one spoken digit, silent edges cut
        assert 10 ** (-40 / 20) < np.sqrt(np.mean(x**2)) < 10 ** (-18 / 20)  # -35..-22 dB RMS
    meta = json.loads((voices / "voices.json").read_text())
    assert [v["speaker"] for v in meta["voices"]] == ["tts000", "tts001"]
    again = synthesize_voices(tmp_path / "again", TtsOptions(voices=2, takes=3))
    assert all((again / p.name).read_bytes() == p.read_bytes() for p in files)  # a pure function of the options
    before = {p.name: p.stat().st_mtime_ns for p in files}
    synthesize_voices(voices, TtsOptions(voices=2, takes=3))  # done for these options: reused, not redone
    assert {p.name: p.stat().st_mtime_ns for p in files} == before
    synthesize_voices(again, TtsOptions(voices=1, takes=1))  # other options: made anew
    assert sorted(p.name for p in again.glob("*.flac")) == [f"{d}_tts000_5.flac" for d in range(10)]


def test_synthetic_speakers_train_only_and_leave_the_rest_unchanged(voices, tmp_path) -> None:
    plain, mixed = tmp_path / "plain", tmp_path / "mixed"
    prepare_fsdd(BUNDLED_FSDD, plain, options=FsddOptions(seed=4, **SMALL), progress=False)
    prepare_fsdd(BUNDLED_FSDD, mixed, options=FsddOptions(seed=4, tts_share=0.5, **SMALL), progress=False,
                 tts_dir=voices)  # fmt: skip
    train = read_manifest(mixed / "train.jsonl")
    by = Counter(r["speaker"].startswith("tts") for r in train)
    assert by[True] >= 8 and by[False] >= 8  # about half of 40 each
    for r in train:
        if r["speaker"].startswith("tts"):
            assert all(t.split("_")[1] == r["speaker"] and (voices / f"{t}.flac").is_file() for t in r["takes"])
    for split in ("dev", "test", "digits_train", "digits_dev", "digits_test"):  # no synthetic speaker here
        assert (mixed / f"{split}.jsonl").read_text().replace(str(mixed), "") == (
            plain / f"{split}.jsonl").read_text().replace(str(plain), "")  # fmt: skip


def test_synthetic_speaker_errors(voices, tmp_path) -> None:
    with pytest.raises(PrepareError, match="both a folder of them .* got 0.5"):
        prepare_fsdd(BUNDLED_FSDD, tmp_path / "o", options=FsddOptions(tts_share=0.5, **SMALL))
    with pytest.raises(PrepareError, match="both a folder of them .* got 0"):
        prepare_fsdd(BUNDLED_FSDD, tmp_path / "o", options=FsddOptions(**SMALL), tts_dir=voices)
    with pytest.raises(ValueError, match="tts_share"):
        FsddOptions(tts_share=1.0).validate()
    clash = tmp_path / "clash"
    shutil.copytree(voices, clash)
    shutil.copyfile(clash / "0_tts000_5.flac", clash / "0_george_5.flac")
    with pytest.raises(PrepareError, match=r"synthetic speaker\(s\) \['george'\] have the names of recorded ones"):
        prepare_fsdd(BUNDLED_FSDD, tmp_path / "o", options=FsddOptions(tts_share=0.5, **SMALL), tts_dir=clash)


def test_without_espeak_the_error_says_what_to_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # as if not installed
    with pytest.raises(PrepareError, match="pip install espeakng-loader .* --tts-voices 0"):
        synthesize_voices(tmp_path / "v", TtsOptions(voices=1, takes=1))


def test_cli_synthesises_then_prepares(tmp_path, capsys) -> None:
    args = ["prepare", "fsdd", "--corpus-dir", str(BUNDLED_FSDD), "--out", str(tmp_path / "data"), "--num-train",
            "6", "--num-dev", "2", "--num-test", "2", "--tts-voices", "1", "--tts-takes", "1", "--tts-share", "0.5"]
    assert main([*args, "--tts-dir", str(tmp_path / "voices")]) == 0
    assert len(list((tmp_path / "voices").glob("*_tts000_5.flac"))) == 10
    assert main(args) == 2  # a share without a folder
    assert "both a folder of them (tts_dir, --tts-dir)" in capsys.readouterr().err
    no_share = [a for a in args if a not in ("--tts-share", "0.5")]
    assert main([*no_share, "--tts-dir", str(tmp_path / "unmade")]) == 2  # checked before any rendering
    assert "a share of the training utterances > 0" in capsys.readouterr().err
    assert not (tmp_path / "unmade").exists()


def test_voices_synthesised_by_two_processes_at_once(tmp_path) -> None:
    """loso.sh --jobs: two runs render into the same folder; one renders, the other waits and reuses."""
    from concurrent.futures import ThreadPoolExecutor

    out, opts = tmp_path / "voices", TtsOptions(voices=1, takes=1)
    with ThreadPoolExecutor(2) as pool:  # separate opens of the lock file: flock excludes them like processes
        done = list(pool.map(lambda _: synthesize_voices(out, opts), range(2)))
    assert done == [out, out]
    assert sorted(p.name for p in out.glob("*.flac")) == [f"{d}_tts000_5.flac" for d in range(10)]
    assert json.loads((out / "voices.json").read_text())["request"]["options"]["voices"] == 1
    assert not out.with_name(".voices.tmp").exists()
