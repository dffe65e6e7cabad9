"""The FSDD recordings that ship with the repository (corpus/fsdd): complete, checked, licensed, lossless."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.cli import main
from asr.corpora.download import ChecksumError, read_sha256sums, sha256sum
from asr.corpora.fsdd import BUNDLED_FSDD, fsdd_speakers, verify_fsdd

SPEAKERS = ["george", "jackson", "lucas", "nicolas", "yweweler"]


def test_bundled_corpus_is_complete_and_matches_its_sums() -> None:
    rec, checked = verify_fsdd(BUNDLED_FSDD)
    assert rec == BUNDLED_FSDD / "recordings" and checked == 2500
    assert fsdd_speakers(BUNDLED_FSDD) == SPEAKERS
    names = {f"recordings/{d}_{s}_{t}" for d in range(10) for s in SPEAKERS for t in range(50)}
    assert {n.removesuffix(".flac") for n in read_sha256sums(BUNDLED_FSDD / "SHA256SUMS")} == names
    assert {n.removesuffix(".wav") for n in read_sha256sums(BUNDLED_FSDD / "upstream-wav.sha256")} == names
    info = sf.info(str(rec / "7_jackson_32.flac"))
    assert (info.format, info.subtype, info.samplerate, info.channels) == ("FLAC", "PCM_16", 8000, 1)
    licence = (BUNDLED_FSDD / "LICENSE").read_text()
    for words in ("CC BY-SA 4.0", "https://creativecommons.org/licenses/by-sa/4.0/", "Zohar Jackson",
                  "github.com/Jakobovski/free-spoken-digit-dataset", "losslessly"):  # fmt: skip
        assert words in licence


def test_bundled_flac_is_the_published_wav_bit_for_bit(data_root) -> None:
    """Every FLAC decodes to its WAV's samples, and upstream-wav.sha256 is of those WAVs' bytes."""
    wavs = data_root / "fsdd" / "recordings"
    upstream = read_sha256sums(BUNDLED_FSDD / "upstream-wav.sha256")
    for name, digest in upstream.items():
        wav = wavs / Path(name).name
        assert sha256sum(wav) == digest, wav
        a, rate_a = sf.read(str(wav), dtype="int16")
        b, rate_b = sf.read(str(BUNDLED_FSDD / name.replace(".wav", ".flac")), dtype="int16")
        assert rate_a == rate_b == 8000 and np.array_equal(a, b), name


@pytest.fixture
def tampered(tmp_path) -> Path:
    """A copy of the bundled corpus with one recording changed (one byte), one gone and one added."""
    corpus = shutil.copytree(BUNDLED_FSDD, tmp_path / "fsdd")
    f = corpus / "recordings" / "3_lucas_7.flac"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 1
    f.write_bytes(bytes(data))
    (corpus / "recordings" / "0_george_0.flac").unlink()
    shutil.copyfile(corpus / "recordings" / "0_george_1.flac", corpus / "recordings" / "0_theo_1.flac")
    return corpus


def test_tampered_bundled_corpus_names_the_files(tampered) -> None:
    with pytest.raises(ChecksumError) as e:
        verify_fsdd(tampered)
    msg = str(e.value)
    assert "3 file(s) missing, changed or not listed (of 2500 listed)" in msg
    assert f"{tampered}/recordings/3_lucas_7.flac: SHA-256 " in msg
    assert f"{tampered}/recordings/0_george_0.flac: missing" in msg
    assert f"{tampered}/recordings/0_theo_1.flac: not listed in SHA256SUMS" in msg


def test_cli_checks_the_bundled_corpus_offline(tampered, capsys) -> None:
    assert main(["download", "fsdd", "--corpus-dir", str(BUNDLED_FSDD), "--no-fetch"]) == 0
    assert "2500 files match SHA256SUMS" in capsys.readouterr().out
    assert main(["download", "fsdd", "--corpus-dir", str(tampered), "--no-fetch"]) == 2
    assert "recordings/3_lucas_7.flac: SHA-256" in capsys.readouterr().err


def test_a_folder_without_sums_is_used_unchecked(tmp_path) -> None:
    rec = tmp_path / "mine"
    rec.mkdir()
    shutil.copyfile(BUNDLED_FSDD / "recordings" / "5_nicolas_9.flac", rec / "5_nicolas_9.flac")
    assert verify_fsdd(tmp_path / "mine") == (rec, None)
