"""Build corpus/fsdd, the FSDD recordings that ship with the repository, from FSDD's WAV files.

    python tools/bundle_fsdd.py [--src ../shared/data/fsdd/recordings] [--out corpus/fsdd]

Each ``{digit}_{speaker}_{take}.wav`` becomes ``recordings/{digit}_{speaker}_{take}.flac``: FLAC is
lossless, and every file's decoded samples are checked equal to the WAV's, bit for bit, before
it is kept. Written beside them: ``SHA256SUMS`` (of the FLAC files, what the recipe checks
offline) and ``upstream-wav.sha256`` (of the original WAV bytes, what ``asr download fsdd``
checks the pinned upstream archive against). Both are in ``sha256sum`` format, paths relative
to the folder. Running it again gives the same bytes with the same libFLAC (it writes its version
into each file, and no date).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
from common import REPO, SHARED_DATA

NAME = re.compile(r"^\d_[A-Za-z0-9]+_\d+\.wav$")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def convert(wav: Path, flac: Path) -> None:
    """Write ``wav`` as 16-bit FLAC at ``flac``; raise unless decoding it gives the WAV's samples exactly."""
    info = sf.info(str(wav))
    if info.subtype != "PCM_16":
        raise SystemExit(f"{wav}: expected 16-bit PCM, got {info.subtype} (FLAC here is 16-bit)")
    samples, rate = sf.read(str(wav), dtype="int16", always_2d=True)
    sf.write(str(flac), samples, rate, format="FLAC", subtype="PCM_16")
    back, back_rate = sf.read(str(flac), dtype="int16", always_2d=True)
    if back_rate != rate or back.shape != samples.shape or not np.array_equal(back, samples):
        flac.unlink()
        raise SystemExit(f"{flac}: decoded samples differ from {wav}; not lossless, nothing kept")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", type=Path, default=SHARED_DATA / "fsdd" / "recordings")
    p.add_argument("--out", type=Path, default=REPO / "corpus" / "fsdd")
    args = p.parse_args(argv)
    wavs = sorted(w for w in args.src.glob("*.wav") if NAME.match(w.name))
    if not wavs:
        raise SystemExit(f"{args.src}: no FSDD recordings ({{digit}}_{{speaker}}_{{take}}.wav)")
    rec = args.out / "recordings"
    rec.mkdir(parents=True, exist_ok=True)
    flac_sums, wav_sums = [], []
    for wav in wavs:
        flac = rec / (wav.stem + ".flac")
        convert(wav, flac)
        flac_sums.append(f"{sha256(flac.read_bytes())}  recordings/{flac.name}\n")
        wav_sums.append(f"{sha256(wav.read_bytes())}  recordings/{wav.name}\n")
    (args.out / "SHA256SUMS").write_text("".join(flac_sums))
    (args.out / "upstream-wav.sha256").write_text("".join(wav_sums))
    print(f"{len(wavs)} recordings converted losslessly to {rec}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
