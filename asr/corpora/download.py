"""Resumable downloads with MD5/SHA-256 checks, and extraction that only ever leaves complete folders.

``download`` writes to ``<dest>.part`` and, after an interruption, asks the server for the rest
with an HTTP ``Range`` request; the finished file is checked against its MD5 or SHA-256 before
it is renamed to ``dest``. ``extract`` unpacks into a temporary folder beside the destination and
renames the wanted folder into place only when the whole archive has been read.
``read_sha256sums``/``verify_sha256sums`` check a folder against a ``sha256sum``-format list, so
that two users of one corpus train on the same bytes.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

__all__ = [
    "DownloadError", "FetchError", "ChecksumError", "download", "md5sum", "sha256sum", "extract",
    "read_sha256sums", "verify_sha256sums",
]  # fmt: skip

log = logging.getLogger(__name__)

CHUNK = 1 << 20
USER_AGENT = "asr-downloader/0.1 (+https://github.com/)"


class DownloadError(RuntimeError):
    """A download or extraction that could not complete; the message names the URL or file."""


class FetchError(DownloadError):
    """The server could not be reached, refused the file, or the transfer broke off for good.

    Separate from a checksum mismatch so that a caller can say what to do offline."""


class ChecksumError(DownloadError):
    """Files whose checksums differ from the published ones (or that are missing); the message names them."""


def _digest(path: str | os.PathLike, algorithm: str, chunk: int = CHUNK) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def md5sum(path: str | os.PathLike, chunk: int = CHUNK) -> str:
    """Hex MD5 of a file, read in chunks."""
    return _digest(path, "md5", chunk)


def sha256sum(path: str | os.PathLike, chunk: int = CHUNK) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    return _digest(path, "sha256", chunk)


def _checksum_problem(path: Path, md5: str | None, sha256: str | None) -> str | None:
    """What is wrong with ``path`` against the expected sums ("MD5 mismatch (...)"), or None when it matches."""
    for name, expected, fn in (("MD5", md5, md5sum), ("SHA-256", sha256, sha256sum)):
        if expected is not None:
            got = fn(path)
            if got != expected.lower():
                return f"{name} mismatch (expected {expected}, got {got})"
    return None


def read_sha256sums(path: str | os.PathLike) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <relative path>`` lines) as {relative path: hex}; errors name ``file:line``."""
    sums: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        name = name.removeprefix("*")  # sha256sum's binary-mode marker
        if not sep or len(digest) != 64 or not name or name in sums:
            raise ChecksumError(f"{path}:{n}: expected '<64 hex digits>  <path>' (each path once), got {line!r}")
        sums[name] = digest.lower()
    return sums


def verify_sha256sums(sums_file: str | os.PathLike, unlisted: str | None = None) -> int:
    """Check every file named in ``sums_file`` (paths relative to its folder); return how many.

    ``unlisted`` is a glob (relative to that folder) of files that must all be listed: a file
    matching it but absent from the list is an error too, since it would be used unchecked.
    Raises :class:`ChecksumError` naming every missing, changed or unlisted file (the first 10).
    """
    sums_file = Path(sums_file)
    root = sums_file.parent
    sums = read_sha256sums(sums_file)
    problems = []
    for name, expected in sums.items():
        path = root / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif (got := sha256sum(path)) != expected:
            problems.append(f"{path}: SHA-256 {got}, expected {expected}")
    if unlisted is not None:
        extra = sorted(p for p in root.glob(unlisted) if p.relative_to(root).as_posix() not in sums)
        problems += [f"{p}: not listed in {sums_file.name}" for p in extra]
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ChecksumError(
            f"{sums_file}: {len(problems)} file(s) missing, changed or not listed (of {len(sums)} listed):\n  "
            + "\n  ".join(problems[:10]) + more
        )
    return len(sums)


def _fetch(url: str, part: Path, timeout: float, progress: bool) -> None:
    """Append the bytes of ``url`` not yet in ``part`` (resuming with Range); raises on any error."""
    have = part.stat().st_size if part.exists() else 0
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to fetch: the part file is already whole
            return
        raise
    with resp:
        if have and resp.status != 206:  # the server ignored Range: start again
            log.warning("%s: server does not resume downloads (HTTP %d); starting over", url, resp.status)
            have = 0
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        mode = "ab" if have else "wb"
        with open(part, mode) as f, tqdm(
            total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
            desc=Path(url).name, disable=not progress, leave=False,
        ) as bar:
            got = 0
            while block := resp.read(CHUNK):
                f.write(block)
                got += len(block)
                bar.update(len(block))
        if length is not None and got < int(length):
            raise DownloadError(f"{url}: connection closed after {have + got} of {total} bytes")


def download(
    url: str,
    dest: str | os.PathLike,
    md5: str | None = None,
    *,
    sha256: str | None = None,
    retries: int = 5,
    timeout: float = 60.0,
    progress: bool = True,
    retry_wait: float = 2.0,
) -> Path:
    """Download ``url`` to ``dest`` unless ``dest`` already exists (and matches ``md5``/``sha256``).

    Interrupted transfers resume from ``dest.part`` (now, up to ``retries`` times, or on the
    next call); when they cannot, :class:`FetchError` says so. A finished file whose MD5 or
    SHA-256 differs from the one given is deleted and :class:`ChecksumError` names the URL and
    both checksums; ``dest`` then does not exist.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file():
        problem = _checksum_problem(dest, md5, sha256)
        if problem is None:
            log.info("%s: already downloaded", dest)
            return dest
        log.warning("%s: %s; downloading it again", dest, problem)
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    if part.exists():
        log.info("%s: resuming after %d bytes", url, part.stat().st_size)
    for attempt in range(retries + 1):
        try:
            _fetch(url, part, timeout, progress)
            break
        except (OSError, http.client.HTTPException, DownloadError) as e:  # URLError, timeouts, resets
            if isinstance(e, urllib.error.HTTPError) and e.code in (403, 404, 410):
                raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from e
            if attempt == retries:
                size = part.stat().st_size if part.exists() else 0
                kept = f"{size} bytes kept in {part}, run again to resume" if size else "nothing received"
                raise FetchError(f"{url}: download failed after {retries + 1} attempt(s) ({e}); {kept}") from e
            log.warning("%s: %s; trying again (attempt %d of %d)", url, e, attempt + 2, retries + 1)
            time.sleep(retry_wait * (attempt + 1))
    problem = _checksum_problem(part, md5, sha256)
    if problem is not None:
        part.unlink()
        raise ChecksumError(
            f"{url}: {problem}; the corrupt download was deleted, run again to fetch it anew (or check --mirror)"
        )
    os.replace(part, dest)
    return dest


def _safe_members_zip(zf: zipfile.ZipFile, archive: Path) -> None:
    for name in zf.namelist():
        p = Path(name)
        if p.is_absolute() or ".." in p.parts:
            raise DownloadError(f"{archive}: refusing to extract unsafe path {name!r}")


def extract(
    archive: str | os.PathLike,
    dest: str | os.PathLike,
    select: Callable[[Path], Path] | None = None,
    members: Callable[[str], bool] | None = None,
    prepare: Callable[[Path], None] | None = None,
) -> Path:
    """Unpack ``archive`` (.tar, .tar.gz, .tgz, .zip) so that ``dest`` appears complete or not at all.

    The archive is unpacked into a temporary folder beside ``dest``; ``select(tmp)`` names the
    folder inside it that becomes ``dest`` (default: ``tmp`` itself), which is then renamed
    into place. ``members(name)`` chooses the members to unpack (default all); ``prepare(src)``
    may add files to the selected folder before the rename. On any error the temporary folder
    is removed and ``dest`` is untouched.
    """
    archive, dest = Path(archive), Path(dest)
    if dest.exists():
        raise DownloadError(f"{dest}: already exists; not extracting {archive} over it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{dest.name}.extract-*"):  # left by an extraction that was killed
        log.info("removing %s, left by an interrupted extraction", stale)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.extract-", dir=dest.parent))
    try:
        log.info("extracting %s", archive)
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                _safe_members_zip(zf, archive)
                zf.extractall(tmp, members=None if members is None else [n for n in zf.namelist() if members(n)])
        else:
            try:
                with tarfile.open(archive) as tf:
                    chosen = None if members is None else [m for m in tf if members(m.name)]
                    tf.extractall(tmp, members=chosen, filter="data")  # rejects absolute paths, "..", devices
            except (tarfile.TarError, EOFError, OSError) as e:
                raise DownloadError(f"{archive}: cannot extract ({e})") from e
        src = select(tmp) if select is not None else tmp
        if not src.is_dir():
            raise DownloadError(f"{archive}: expected the folder {src.relative_to(tmp)} inside the archive")
        if prepare is not None:
            prepare(src)
        os.replace(src, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
