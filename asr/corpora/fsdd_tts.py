"""Synthetic voices for FSDD: the ten digits spoken by espeak-ng, as extra training speakers.

Four training speakers are few voices to generalise from. espeak-ng, a formant synthesiser
(installed from PyPI as ``espeakng-loader``, which carries the library and its data), speaks with
many accents and voice variants at any pitch, pitch range and rate: each synthetic speaker is one
draw of those (``tts000``, ``tts001``, ...), each take a small draw of rate and pitch around his.
Takes are written like FSDD's own, ``{digit}_tts{NNN}_{take}.flac`` at 8 kHz with their silent
edges cut, so ``asr prepare fsdd --tts-dir`` reads them as it reads the recordings; they join the
training pool only, never dev or test.

Everything is a pure function of the options (and espeak-ng's version): ``voices.json`` records
them, and a folder that holds a finished set for the same options is reused as it is. espeak-ng
keeps state from one synthesis to the next (its noise generators, a voice's settings), so the set
is rendered in a fresh process, each take after seeding the noise.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import logging
import multiprocessing
import os
import random
import shutil
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from asr.corpora.librispeech import PrepareError
from asr.features.audio import resample

__all__ = ["TtsOptions", "Espeak", "synthesize_voices", "TTS_PREFIX"]

log = logging.getLogger(__name__)

TTS_PREFIX = "tts"  # speaker names of synthetic voices start with it
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
ACCENTS = ("en-us", "en", "en-gb-x-rp", "en-gb-scotland", "en-029", "en-us-nyc", "en-gb-x-gbclan", "en-gb-x-gbcwmd")
# espeak-ng's voice variants that sound like a person (its robots, whisper and effects left out)
VARIANTS = (
    "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2", "klatt3",
    "klatt4", "klatt6", "Alex", "Andy", "Annie", "Denis", "Gene", "Hugo", "Jacky", "Lee", "Marco", "Mario",
    "Michael", "Mike", "Nguyen", "Reed", "adam", "anika", "antonio", "aunty", "belinda", "benjamin", "boris",
    "caleb", "david", "ed", "edward", "gustave", "ian", "iven", "john", "linda", "marcelo", "max", "michel",
    "miguel", "norbert", "pablo", "paul", "pedro", "quincy", "rob", "robert", "robosoft", "sandro", "shelby",
    "steph", "travis", "victor", "zac",
)  # fmt: skip
OUT_RATE = 8000
DONE = "voices.json"


@dataclass
class TtsOptions:
    voices: int = 100  # synthetic speakers
    takes: int = 10  # takes of each digit per speaker (numbered 5.. like FSDD's training takes)
    seed: int = 0


class Espeak:
    """espeak-ng through its C API (ctypes), synchronous: :meth:`say` returns the samples."""

    # espeak_PARAMETER
    RATE, PITCH, RANGE = 1, 3, 4

    @staticmethod
    def check_installed() -> None:
        try:
            import espeakng_loader  # noqa: F401
        except ImportError as e:
            raise PrepareError(
                "synthetic voices need espeak-ng: pip install espeakng-loader (or pip install -e '.[tts]'), "
                "or leave them out (asr prepare fsdd without --tts-dir; run.sh --tts-voices 0)"
            ) from e

    def __init__(self) -> None:
        self.check_installed()
        import espeakng_loader

        self.lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self.rate = self.lib.espeak_Initialize(2, 0, espeakng_loader.get_data_path().encode(), 0)  # 2: synchronous
        if self.rate <= 0:
            raise PrepareError(f"espeak-ng failed to start (espeak_Initialize returned {self.rate})")
        self._chunks: list[np.ndarray] = []
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

        def collect(wav, n, _events):
            if n > 0:
                self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            return 0

        self._callback = proto(collect)  # kept alive as long as the engine
        self.lib.espeak_SetSynthCallback(self._callback)
        self._libc = ctypes.CDLL(None)

    def seed(self, value: int) -> None:
        """Seed the noise of the next syntheses (breath, aspiration): the same calls give the same audio.
        espeak-ng has its own generator (``espeak_ng_SetRandSeed``) and also calls the C library's rand()."""
        self.lib.espeak_ng_SetRandSeed(ctypes.c_long(value))
        self._libc.srand(ctypes.c_uint(value & 0xFFFFFFFF))

    def say(self, text: str, voice: str, rate: int, pitch: int, pitch_range: int) -> np.ndarray:
        """float32 samples at :attr:`rate` Hz of ``text`` in ``voice`` (e.g. ``en-us+m3``); rate in
        words per minute, pitch and its range 0-99."""
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError(f"espeak-ng has no voice {voice!r}")
        for param, value in ((self.RATE, rate), (self.PITCH, pitch), (self.RANGE, pitch_range)):
            self.lib.espeak_SetParameter(param, int(value), 0)
        self._chunks.clear()
        data = text.encode()
        self.lib.espeak_Synth(data, len(data) + 1, 0, 1, 0, 0, None, None)  # position 0 in characters
        self.lib.espeak_Synchronize()
        if not self._chunks:
            raise ValueError(f"espeak-ng produced no audio for {text!r} in {voice!r}")
        return np.concatenate(self._chunks).astype(np.float32) / 32768


def _cut_silence(x: np.ndarray, floor_db: float = -45.0, pad: int = 40) -> np.ndarray:
    """Drop the silent edges (10 ms energy below ``floor_db`` of the loudest), keep ``pad`` samples."""
    energy = np.convolve(x**2, np.ones(80) / 80, mode="same")
    on = np.nonzero(energy > energy.max() * 10 ** (floor_db / 10))[0]
    return x[max(0, on[0] - pad) : on[-1] + pad]


def synthesize_voices(out_dir: str | os.PathLike, opts: TtsOptions | None = None) -> Path:
    """Write ``opts.voices`` synthetic speakers' takes into ``out_dir`` (reused when done for the same options).

    Safe to call from several processes at once (``loso.sh --jobs``): the first renders, under a lock
    beside ``out_dir``, and the others wait for it and reuse its takes.
    """
    opts = opts or TtsOptions()
    out = Path(out_dir)
    want = {"options": asdict(opts), "accents": list(ACCENTS), "variants": list(VARIANTS)}
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(f".{out.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, or the process dies
        if (out / DONE).is_file() and json.loads((out / DONE).read_text()).get("request") == want:
            return out
        tmp = out.with_name(f".{out.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        Espeak.check_installed()
        worker = multiprocessing.get_context("spawn").Process(target=_render, args=(tmp, opts, want))
        worker.start()
        worker.join()
        if worker.exitcode != 0:
            raise PrepareError(
                f"{out}: synthesising the voices failed (exit code {worker.exitcode}; its error is above)")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    log.info("%s: %d synthetic speakers x %d takes of each digit (espeak-ng)", out, opts.voices, opts.takes)
    return out


def _render(tmp: Path, opts: TtsOptions, want: dict) -> None:
    """Write the takes and ``voices.json`` into ``tmp`` (run in a fresh process: see the module docstring)."""
    engine = Espeak()
    rng = random.Random(opts.seed)
    voices = []
    for i in range(opts.voices):
        voice = f"{rng.choice(ACCENTS)}+{rng.choice(VARIANTS)}"
        pitch, pitch_range, rate = rng.randint(15, 85), rng.randint(20, 90), rng.randint(120, 220)
        voices.append({"speaker": f"{TTS_PREFIX}{i:03d}", "voice": voice, "pitch": pitch, "range": pitch_range,
                       "rate": rate})  # fmt: skip
        for digit, word in enumerate(WORDS):
            for take in range(5, 5 + opts.takes):
                engine.seed(zlib.crc32(f"{opts.seed}-{i}-{digit}-{take}".encode()))
                x = engine.say(word, voice, int(rate * rng.uniform(0.85, 1.15)),
                               min(99, max(0, pitch + rng.randint(-8, 8))), pitch_range)  # fmt: skip
                x = _cut_silence(resample(torch.from_numpy(x), engine.rate, OUT_RATE).numpy())
                x = x / (np.sqrt(np.mean(x**2)) + 1e-9) * 10 ** (rng.uniform(-35, -22) / 20)  # -35..-22 dB RMS
                sf.write(str(tmp / f"{digit}_{TTS_PREFIX}{i:03d}_{take}.flac"), np.clip(x, -1, 1), OUT_RATE)
    (tmp / DONE).write_text(json.dumps({"request": want, "voices": voices}, indent=1) + "\n")
