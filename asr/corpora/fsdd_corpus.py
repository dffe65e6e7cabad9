"""The FSDD recordings: where they are, how they are checked, and the pinned download.

Five speakers' 2,500 clips ship with the repository as lossless FLAC (``corpus/fsdd``, with
FSDD's licence and a ``SHA256SUMS``), so the recipe needs no network; :func:`download_fsdd`
fetches a pinned upstream commit instead of a moving branch and checks every recording of those
speakers against the SHA-256 of the original WAV bytes before extracting any. A recordings folder
with a ``SHA256SUMS`` beside it is checked by :func:`verify_fsdd`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import zipfile
from pathlib import Path, PurePosixPath

from asr.atomic import atomic_write_text
from asr.corpora.download import ChecksumError, FetchError, download, extract, read_sha256sums, verify_sha256sums
from asr.corpora.librispeech import PrepareError

__all__ = ["BUNDLED_FSDD", "FSDD_COMMIT", "FSDD_URL", "find_recordings", "verify_fsdd", "download_fsdd"]

log = logging.getLogger(__name__)

# The commit that added lucas, the last of the bundled speakers: its tree has their recordings and
# theo's (six speakers, as its metadata.py lists). A commit, not a branch: the archive cannot change.
FSDD_COMMIT = "d6938f9bf1545aa66d8489fc9f1385a7abd64282"
FSDD_URL = f"https://github.com/Jakobovski/free-spoken-digit-dataset/archive/{FSDD_COMMIT}.zip"
# The recordings that ship with the repository (absent from an installed copy of the package alone).
BUNDLED_FSDD = Path(__file__).resolve().parents[2] / "corpus" / "fsdd"
UPSTREAM_SUMS = BUNDLED_FSDD / "upstream-wav.sha256"  # SHA-256 of the original WAV bytes
SUMS = "SHA256SUMS"
CLIP_NAME = re.compile(r"^(\d)_([A-Za-z0-9]+)_(\d+)\.(wav|flac)$")
OFFLINE_HINT = (
    "No internet access is needed for FSDD: without --download the recipe uses the recordings bundled "
    f"in {BUNDLED_FSDD}; or give a folder of FSDD recordings of your own with --corpus-dir DIR."
)



def find_recordings(corpus_dir: str | os.PathLike) -> Path:
    """The folder of FSDD clips (wav or flac): ``DIR/recordings``, ``DIR/*/recordings`` or ``DIR`` itself."""
    root = Path(corpus_dir)
    candidates = [root / "recordings", *sorted(root.glob("*/recordings")), root]
    for c in candidates:
        if c.is_dir() and any(CLIP_NAME.match(p.name) for p in c.iterdir()):
            return c
    raise PrepareError(
        f"{root}: no FSDD recordings ({{digit}}_{{speaker}}_{{take}}.wav or .flac) in it or in recordings/ below "
        f"it; add --download to fetch FSDD's pinned archive into it, or leave --corpus-dir out to use the "
        f"recordings bundled in {BUNDLED_FSDD}"
    )


def verify_fsdd(corpus_dir: str | os.PathLike) -> tuple[Path, int | None]:
    """The recordings folder of ``corpus_dir`` and how many files its ``SHA256SUMS`` vouches for.

    The list is looked for beside the recordings folder and inside it; every file it names must
    match, and every FSDD-named file in the folder must be in it (else it would be used
    unchecked): :class:`ChecksumError` names the files that do not. ``None``: no list, nothing checked.
    """
    rec = find_recordings(corpus_dir)
    for sums in (rec.parent / SUMS, rec / SUMS):
        if sums.is_file():
            rel = rec.relative_to(sums.parent).as_posix()
            pattern = "*_*_*.*" if rel == "." else f"{rel}/*_*_*.*"
            try:
                return rec, verify_sha256sums(sums, unlisted=pattern)
            except ChecksumError as e:
                if sums.parent.resolve() != BUNDLED_FSDD:
                    raise
                raise ChecksumError(f"{e}\n(`git checkout -- corpus/fsdd` restores the repository's copy)") from e
    log.info("%s: no %s beside the recordings, so they are not checked", rec, SUMS)
    return rec, None


def _check_archive(archive: Path, expected: dict[str, str]) -> dict[str, str]:
    """{member name: sha256} of the recordings in ``archive`` that ``expected`` ({file name: sha256}) lists.

    Every listed recording must be in the archive with exactly those bytes (checked in memory,
    before anything is written); otherwise :class:`ChecksumError` names them. Recordings of
    other speakers are counted and left out."""
    found: dict[str, str] = {}
    problems, others = [], set()
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                p = PurePosixPath(info.filename)
                if p.parent.name != "recordings" or not CLIP_NAME.match(p.name):
                    continue
                if p.name not in expected:
                    others.add(p.name)
                    continue
                got = hashlib.sha256(zf.read(info)).hexdigest()
                if got != expected[p.name]:
                    problems.append(f"{info.filename}: SHA-256 {got}, expected {expected[p.name]}")
                found[info.filename] = got
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as e:
        raise ChecksumError(f"{archive}: not a readable zip archive ({e}); nothing was extracted") from e
    present = {PurePosixPath(m).name for m in found}
    problems += [f"{name}: missing from the archive" for name in sorted(set(expected) - present)]
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ChecksumError(
            f"{archive}: {len(problems)} recording(s) changed or missing against {UPSTREAM_SUMS.name}; nothing "
            "was extracted and the archive was deleted:\n  " + "\n  ".join(problems[:10]) + more
        )
    if others:
        speakers = sorted({CLIP_NAME.match(n).group(2) for n in others})
        log.info("%s: %d recording(s) of speaker(s) without checksums (%s) left out", archive, len(others),
                 ", ".join(speakers))
    return found


def download_fsdd(
    corpus_dir: str | os.PathLike,
    url: str = FSDD_URL,
    sha256: str | None = None,
    *,
    upstream_sums: str | os.PathLike = UPSTREAM_SUMS,
    progress: bool = True,
    retries: int = 2,
    retry_wait: float = 2.0,
) -> Path:
    """Fetch FSDD's pinned archive into ``corpus_dir/free-spoken-digit-dataset/recordings`` unless present.

    Before anything is extracted, every recording listed in ``upstream_sums`` (the bundled
    speakers' original WAVs) is checked in the archive; any difference is a
    :class:`ChecksumError` naming the files, and the archive is deleted. Only those recordings
    are extracted (other speakers' have no checksum; their count is logged), with a
    ``SHA256SUMS`` that :func:`verify_fsdd` checks on later runs. ``sha256`` checks the whole
    archive too, when known. A server out of reach is a :class:`FetchError` that says what to
    do offline.
    """
    root = Path(corpus_dir)
    try:
        found = find_recordings(root)
        log.info("FSDD already present at %s, not downloading", found)
        return found
    except PrepareError:
        pass
    if not Path(upstream_sums).is_file():  # e.g. a package installed without its repository
        raise ChecksumError(f"{upstream_sums}: missing; without FSDD's checksums nothing can be checked, "
                            "so nothing is downloaded (a clone of the repository has it in corpus/fsdd)")
    expected = {PurePosixPath(k).name: v for k, v in read_sha256sums(upstream_sums).items()}
    archive = root / f"free-spoken-digit-dataset-{url.rstrip('/').rsplit('/', 1)[-1]}"
    try:
        download(url, archive, sha256=sha256, progress=progress, retries=retries, retry_wait=retry_wait)
    except FetchError as e:
        raise FetchError(f"{e}\n{OFFLINE_HINT}") from e
    try:
        members = _check_archive(archive, expected)
    except ChecksumError:
        archive.unlink(missing_ok=True)
        raise

    def top(tmp: Path) -> Path:  # the folder holding recordings/ (GitHub's is <repo>-<commit>/)
        return min(tmp.rglob("recordings"), key=lambda p: len(p.parts)).parent

    def write_sums(folder: Path) -> None:
        lines = sorted(f"{h}  recordings/{PurePosixPath(m).name}\n" for m, h in members.items())
        atomic_write_text(folder / SUMS, "".join(lines))

    extract(archive, root / "free-spoken-digit-dataset", select=top, members=members.__contains__,
            prepare=write_sums)
    archive.unlink()
    log.info("FSDD: %d recordings of %s checked and extracted", len(members), url)
    return find_recordings(root)
