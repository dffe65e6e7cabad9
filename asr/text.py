"""Transcript normalisation and the SentencePiece tokenizer whose ids are the model's ids.

Normalisation is explicit and per corpus (``normalize(text, kind)``) and is applied the same way
to training text, references and hypotheses. The tokenizer is trained so that SentencePiece's own
ids are the model's ids: 0 ``<blank>`` (CTC blank, also the pad value), 1 ``<unk>``,
``vocab_size - 1`` ``<sos/eos>``, every other id a subword. No other special symbols exist.
"""

from __future__ import annotations

import io
import logging
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from asr.atomic import atomic_write

__all__ = [
    "NORMALIZERS",
    "normalize",
    "Tokenizer",
    "TokenizerError",
    "BLANK",
    "UNK",
    "SOS_EOS",
    "TOKENIZER_FILE",
]

log = logging.getLogger(__name__)

BLANK = "<blank>"
UNK = "<unk>"
SOS_EOS = "<sos/eos>"
TOKENIZER_FILE = "tokenizer.model"
MODEL_TYPES = ("unigram", "bpe", "char")

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_NOT_LETTER_OR_APOSTROPHE = re.compile(r"[^A-Z']+")
_LONE_APOSTROPHES = re.compile(r"(?<![A-Z])'+(?![A-Z])")


def _strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def normalize_librispeech(text: str) -> str:
    """LibriSpeech style: upper case, letters A-Z and the apostrophe only, single spaces.

    Accents are stripped (``café`` -> ``CAFE``), typographic apostrophes become ``'``, every
    other character (punctuation, hyphens, digits) becomes a word break, and apostrophes that
    are not attached to a letter are dropped. Digits are NOT spelled out: corpora whose text
    has numerals (LJ Speech) lose them here, so use ``none`` and a corpus-specific normaliser.
    Used for LibriSpeech, FSDD and AN4, whose transcripts already have this form.
    """
    t = _strip_accents(text).translate(_APOSTROPHES).upper()
    t = _NOT_LETTER_OR_APOSTROPHE.sub(" ", t)
    t = _LONE_APOSTROPHES.sub(" ", t)
    return " ".join(t.split())


def normalize_none(text: str) -> str:
    """Text as given, except that runs of whitespace become single spaces and the ends are trimmed."""
    return " ".join(text.split())


def normalize_whisper(text: str) -> str:
    """Whisper's English normaliser (the 'whisper' extra's whisper-normalizer package): lower case, no
    punctuation, numbers as digits ("twenty five" and "25" both "25"), American spellings ("colour"
    "color"), abbreviations spelled out ("mr" "mister"), filler words dropped. For written-form
    output (Whisper's "25", "Mr.") against spoken-form references (LibriSpeech's): both sides alike."""
    global _whisper_english
    if _whisper_english is None:
        from asr.whisper_text import whisper_english_normalizer

        _whisper_english = whisper_english_normalizer()
    return " ".join(_whisper_english(text).split())


_whisper_english = None
_DIGIT_WORDS = dict(zip("0123456789", "ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE".split(), strict=True))


def normalize_digits(text: str) -> str:
    """Spoken digits: each digit character read as its word ("79" and "7, 9." both "SEVEN NINE"), then
    LibriSpeech style. For digit strings (FSDD), where a written-form recogniser (Whisper) writes numbers."""
    return normalize_librispeech("".join(f" {_DIGIT_WORDS[c]} " if c in _DIGIT_WORDS else c for c in text))


def normalize_lower(text: str) -> str:
    """Lower case, single spaces: a spoken-form transcript as a Whisper model is fine-tuned to write it."""
    return normalize_none(text).lower()

NORMALIZERS: dict[str, Callable[[str], str]] = {
    "librispeech": normalize_librispeech,
    "none": normalize_none,
    "whisper": normalize_whisper,
    "digits": normalize_digits,
    "lower": normalize_lower,
}


def normalize(text: str, kind: str = "librispeech") -> str:
    """Normalise one transcript with the named normaliser (see ``NORMALIZERS``)."""
    try:
        fn = NORMALIZERS[kind]
    except KeyError:
        raise ValueError(f"unknown text normaliser {kind!r}: expected one of {', '.join(NORMALIZERS)}") from None
    return fn(text)


class TokenizerError(ValueError):
    """A tokenizer that cannot be trained or loaded; the message names the file or the setting."""


class Tokenizer:
    """A SentencePiece model whose ids are the model's ids (see the module docstring).

    Picklable (DataLoader workers get a copy). ``encode`` never emits the special ids;
    ``decode`` drops them.
    """

    blank_id = 0
    pad_id = 0
    unk_id = 1

    def __init__(self, processor: spm.SentencePieceProcessor, model_path: str | os.PathLike | None = None):
        self.sp = processor
        self.model_path = Path(model_path) if model_path is not None else None
        n = self.sp.get_piece_size()
        expected = {0: BLANK, 1: UNK, n - 1: SOS_EOS}
        got = {i: self.sp.id_to_piece(i) for i in expected}
        if n < 3 or got != expected:
            where = self.model_path or "tokenizer"
            raise TokenizerError(
                f"{where}: expected special pieces {expected} (train it with `asr tokenizer`), got {got}"
            )
        extra = [self.sp.id_to_piece(i) for i in range(1, n - 1) if self.sp.is_control(i)]
        if extra:
            raise TokenizerError(f"{self.model_path or 'tokenizer'}: unexpected control symbols {extra}")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    @property
    def sos_id(self) -> int:
        return self.vocab_size - 1

    @property
    def eos_id(self) -> int:
        return self.vocab_size - 1

    def encode(self, text: str) -> list[int]:
        """Subword ids of an (already normalised) transcript; unknown characters map to ``unk_id``."""
        return self.sp.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a sequence of ids; blank and sos/eos are dropped, ``<unk>`` reads as `` ⁇ ``."""
        special = (self.blank_id, self.eos_id)
        return self.sp.decode([int(i) for i in ids if int(i) not in special])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def vocabulary(self) -> list[str]:
        """All pieces in id order."""
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, model_path={str(self.model_path)!r})"

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Load ``path`` (a ``.model`` file, or a directory holding ``tokenizer.model``)."""
        p = Path(path)
        if p.is_dir():
            p = p / TOKENIZER_FILE
        if not p.is_file():
            raise TokenizerError(f"{p}: no such tokenizer model (train one with `asr tokenizer`)")
        sp = spm.SentencePieceProcessor()
        try:
            sp.load(str(p))
        except (OSError, RuntimeError) as e:
            raise TokenizerError(f"{p}: not a SentencePiece model ({e})") from e
        return cls(sp, p)

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        out_dir: str | os.PathLike,
        vocab_size: int | None,
        model_type: str = "unigram",
        *,
        character_coverage: float = 1.0,
        max_sentences: int = 5_000_000,
        num_threads: int | None = None,
    ) -> Tokenizer:
        """Train on (already normalised) ``texts`` and write ``out_dir/tokenizer.model`` (+ ``.vocab``).

        ``vocab_size`` counts everything, specials included. For ``char`` it may be None: the
        vocabulary is then exactly the characters of the text plus ``▁`` and the three specials.
        A size the text cannot fill raises :class:`TokenizerError` with the largest size that works.
        """
        if model_type not in MODEL_TYPES:
            raise TokenizerError(f"model_type: expected one of {', '.join(MODEL_TYPES)}, got {model_type!r}")
        sentences = [t for t in (" ".join(s.split()) for s in texts) if t]
        if not sentences:
            raise TokenizerError("no non-empty transcripts to train the tokenizer on")
        if model_type == "char":
            chars = sorted({c for s in sentences for c in s if c != " "})
            needed = len(chars) + 4  # + ▁, <blank>, <unk>, <sos/eos>
            if vocab_size is None or vocab_size <= 0:
                vocab_size = needed
            elif vocab_size != needed:
                raise TokenizerError(
                    f"vocab_size: a char tokenizer for this text has exactly {needed} ids "
                    f"({len(chars)} characters + ▁ + <blank>, <unk>, <sos/eos>), got {vocab_size}; "
                    "give that number or leave the size out"
                )
        elif vocab_size is None or vocab_size < 4:
            raise TokenizerError(f"vocab_size: expected an integer >= 4 for {model_type}, got {vocab_size!r}")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        options = dict(
            model_type=model_type,
            character_coverage=character_coverage,
            normalization_rule_name="identity",  # text is normalised by asr.text.normalize, not by spm
            pad_id=0,
            pad_piece=BLANK,
            unk_id=1,
            unk_piece=UNK,
            bos_id=-1,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            num_threads=num_threads or os.cpu_count() or 1,
            minloglevel=2,
        )
        proto = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=proto,
                vocab_size=vocab_size,
                eos_id=vocab_size - 1,
                eos_piece=SOS_EOS,
                **options,
            )
        except RuntimeError as e:
            raise TokenizerError(cls._explain_failure(sentences, vocab_size, model_type, options, e)) from None
        sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
        model_path = out / TOKENIZER_FILE
        with atomic_write(model_path, "wb") as f:
            f.write(proto.getvalue())
        vocab_lines = (f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n" for i in range(sp.get_piece_size()))
        (out / "tokenizer.vocab").write_text("".join(vocab_lines), encoding="utf-8")
        tok = cls(sp, model_path)
        log.info("trained a %s tokenizer with %d ids on %d transcripts: %s", model_type, tok.vocab_size,
                 len(sentences), model_path)
        return tok

    @staticmethod
    def _explain_failure(sentences: list[str], vocab_size: int, model_type: str, options: dict, err: Exception) -> str:
        """Turn SentencePiece's internal error into a message that names the largest usable size."""
        # spm reports "Vocabulary size too high (N). Please set it to a value <= M." only when no
        # piece is pinned to the last id, so ask it again that way to learn the limit.
        msg = str(err)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences), model_writer=io.BytesIO(), vocab_size=vocab_size - 1,
                eos_id=-1, **options,
            )
        except RuntimeError as e2:
            msg = str(e2)
        m = re.search(r"value <= (\d+)", msg)
        if m:
            return (
                f"vocab_size: {vocab_size} is too large for these transcripts with model_type={model_type}; "
                f"use at most {int(m.group(1)) + 1} (or more text)"
            )
        return f"SentencePiece training failed (vocab_size={vocab_size}, model_type={model_type}): {msg}"
