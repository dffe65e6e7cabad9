"""Resumable downloads with MD5 checks, and extraction that only ever leaves complete folders.

``download`` writes to ``<dest>.part`` and, after an interruption, asks the server for the rest
with an HTTP ``Range`` request; the finished file is checked against its MD5 before it is
renamed to ``dest``. ``extract`` unpacks into a temporary folder beside the destination and
renames the wanted folder into place only when the whole archive has been read.
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

__all__ = ["DownloadError", "download", "md5sum", "extract"]

log = logging.getLogger(__name__)

CHUNK = 1 << 20
USER_AGENT = "asr-downloader/0.1 (+https://github.com/)"


class DownloadError(RuntimeError):
    """A download or extraction that could not complete; the message names the URL or file."""


def md5sum(path: str | os.PathLike, chunk: int = CHUNK) -> str:
    """Hex MD5 of a file, read in chunks."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


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
    retries: int = 5,
    timeout: float = 60.0,
    progress: bool = True,
    retry_wait: float = 2.0,
) -> Path:
    """Download ``url`` to ``dest`` unless ``dest`` already exists (and matches ``md5``).

    Interrupted transfers resume from ``dest.part`` (now, up to ``retries`` times, or on the
    next call). A finished file whose MD5 differs from ``md5`` is deleted and
    :class:`DownloadError` names the URL and both checksums; ``dest`` then does not exist.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file():
        if md5 is None or md5sum(dest) == md5:
            log.info("%s: already downloaded", dest)
            return dest
        log.warning("%s: checksum does not match %s; downloading it again", dest, md5)
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
                raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from e
            if attempt == retries:
                size = part.stat().st_size if part.exists() else 0
                raise DownloadError(
                    f"{url}: download failed after {retries + 1} attempt(s) ({e}); {size} bytes kept in "
                    f"{part}, run again to resume"
                ) from e
            log.warning("%s: %s; resuming (attempt %d of %d)", url, e, attempt + 2, retries + 1)
            time.sleep(retry_wait * (attempt + 1))
    if md5 is not None:
        got = md5sum(part)
        if got != md5:
            part.unlink()
            raise DownloadError(
                f"{url}: MD5 mismatch (expected {md5}, got {got}); the corrupt download was deleted, "
                "run again to fetch it anew (or check --mirror)"
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
) -> Path:
    """Unpack ``archive`` (.tar, .tar.gz, .tgz, .zip) so that ``dest`` appears complete or not at all.

    The archive is unpacked into a temporary folder beside ``dest``; ``select(tmp)`` names the
    folder inside it that becomes ``dest`` (default: ``tmp`` itself), which is then renamed
    into place. On any error the temporary folder is removed and ``dest`` is untouched.
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
                zf.extractall(tmp)
        else:
            try:
                with tarfile.open(archive) as tf:
                    tf.extractall(tmp, filter="data")  # rejects absolute paths, "..", devices
            except (tarfile.TarError, EOFError, OSError) as e:
                raise DownloadError(f"{archive}: cannot extract ({e})") from e
        src = select(tmp) if select is not None else tmp
        if not src.is_dir():
            raise DownloadError(f"{archive}: expected the folder {src.relative_to(tmp)} inside the archive")
        os.replace(src, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
