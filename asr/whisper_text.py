"""Whisper's tokenizer (byte-level BPE with its special tokens) and its English text normaliser.

The BPE itself is Hugging Face's ``tokenizers`` reading the ``tokenizer.json`` that Hugging Face
and CTranslate2 / faster-whisper model folders carry (``pip install 'asr[whisper]'``). What this
module adds is Whisper's: the special tokens found by name in that file (start of transcript,
languages, tasks, no-timestamps, then 1501 timestamps, 0.00 to 30.00 s), the prompt a
transcription starts from, the tokens its search never emits, and decoding as openai-whisper
decodes (timestamp tokens dropped; bytes that are not UTF-8 become U+FFFD).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

__all__ = ["WhisperTokenizer", "WHISPER_TOKENIZER_FILE", "whisper_english_normalizer", "need_whisper_extra"]

WHISPER_TOKENIZER_FILE = "tokenizer.json"
TIMESTAMPS = 1501  # <|0.00|> .. <|30.00|>, every 20 ms
TIME_PRECISION = 0.02
MULTILINGUAL_VOCAB = 51865  # Whisper's rule: a vocabulary this large has every language token

# Whisper's "non-speech" symbols: a token that spells one of these alone (with or without a leading
# space) is never emitted with the default suppression (openai-whisper's tokenizer defines the set).
_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
_MUSIC = list("♩♪♫♬♭♮♯")  # their first token is suppressed even where they take several


def need_whisper_extra(what: str) -> ImportError:
    return ImportError(f"{what} needs the 'whisper' extra: pip install 'asr[whisper]' (tokenizers, safetensors)")


class WhisperTokenizer:
    """A Whisper ``tokenizer.json`` and its special ids. ``multilingual``: the model's vocabulary has
    room for every language token (Whisper's rule: 51865 ids or more); English-only models start a
    transcription with start-of-transcript alone."""

    def __init__(self, path: str | os.PathLike, multilingual: bool):
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise need_whisper_extra("a Whisper tokenizer") from None
        p = Path(path)
        if p.is_dir():
            p = p / WHISPER_TOKENIZER_FILE
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such tokenizer file (Whisper models need a tokenizer.json)")
        try:
            self.bpe = HFTokenizer.from_file(str(p))
        except Exception as e:  # tokenizers raises its own Exception types
            raise ValueError(f"{p}: not a tokenizers JSON file ({e})") from None
        self.path = self.model_path = p
        self.multilingual = multilingual
        vocab = self.bpe.get_vocab(with_added_tokens=True)

        def special(*names: str) -> int:
            for name in names:
                if name in vocab:
                    return vocab[name]
            raise ValueError(f"{p}: has no special token {names[0]} (not a Whisper tokenizer)")

        self.eot = special("<|endoftext|>")
        self.sot = special("<|startoftranscript|>")
        self.translate = special("<|translate|>")
        self.transcribe = special("<|transcribe|>")
        self.sot_lm = special("<|startoflm|>")
        self.sot_prev = special("<|startofprev|>")
        self.no_speech = special("<|nospeech|>", "<|nocaptions|>")
        self.no_timestamps = special("<|notimestamps|>")
        self.timestamp_begin = self.no_timestamps + 1
        by_id = {i: t for t, i in vocab.items()}
        self.languages = [by_id[i][2:-2] for i in range(self.sot + 1, self.translate)]  # <|en|> ... in id order
        if not all(by_id[i].startswith("<|") for i in range(self.sot + 1, self.translate)):
            raise ValueError(f"{p}: the ids between <|startoftranscript|> and <|translate|> are not languages")

    @classmethod
    def for_model(cls, path: str | os.PathLike, vocab_size: int, model: str = "the model") -> WhisperTokenizer:
        """The tokenizer of a Whisper model with ``vocab_size`` ids: multilingual at 51865 ids or more
        (Whisper's rule); a tokenizer of another size is an error naming both."""
        tok = cls(path, multilingual=vocab_size >= MULTILINGUAL_VOCAB)
        if tok.vocab_size != vocab_size:
            raise ValueError(f"{tok.path}: a tokenizer of {tok.vocab_size} ids (with timestamps); {model} has "
                             f"{vocab_size}")
        return tok

    @property
    def vocab_size(self) -> int:
        """Ids the model needs: text, special and timestamp tokens."""
        return self.timestamp_begin + TIMESTAMPS

    def language_token(self, code: str) -> int:
        if code not in self.languages:
            raise ValueError(f"language {code!r}: not one of this tokenizer's {len(self.languages)} "
                             f"({', '.join(self.languages[:8])}, ...)")
        return self.sot + 1 + self.languages.index(code)

    @property
    def language_tokens(self) -> list[int]:
        return list(range(self.sot + 1, self.translate))

    def prompt(self, language: str | None, task: str = "transcribe", timestamps: bool = False) -> list[int]:
        """The tokens a transcription starts from: start of transcript, then (multilingual models) the
        language and the task, then no-timestamps unless segment times are asked for."""
        out = [self.sot]
        if self.multilingual:
            out += [self.language_token(language or "en"), self.translate if task == "translate" else self.transcribe]
        return out if timestamps else [*out, self.no_timestamps]

    @cached_property
    def non_speech_tokens(self) -> list[int]:
        """Tokens that spell only punctuation or music symbols (Whisper's default suppression)."""
        out = {self._encode(" -")[0], self._encode(" '")[0]}
        for symbol in _SYMBOLS + _MUSIC:
            for ids in (self._encode(symbol), self._encode(" " + symbol)):
                if len(ids) == 1 or symbol in _MUSIC:
                    out.add(ids[0])
        return sorted(out)

    @cached_property
    def suppress_tokens(self) -> list[int]:
        """What Whisper's search never emits (its ``suppress_tokens="-1"``): the non-speech tokens and
        the special tokens that only prompts hold."""
        specials = [self.transcribe, self.translate, self.sot, self.sot_prev, self.sot_lm, self.no_speech]
        return sorted(set(self.non_speech_tokens) | set(specials))

    @cached_property
    def suppress_at_start(self) -> list[int]:
        """Never the first token: a blank (" ") or end of text (Whisper's ``suppress_blank``)."""
        return [*self._encode(" "), self.eot]

    def _encode(self, text: str) -> list[int]:
        return self.bpe.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        """Text tokens of a transcript (no special tokens), with the leading space Whisper's texts have."""
        return self._encode(text if text.startswith(" ") else " " + text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` as openai-whisper's ``decode`` gives it: timestamps and end of text dropped,
        the bytes joined (anything that is not UTF-8 becomes U+FFFD), spaces at the ends stripped."""
        keep = [int(i) for i in ids if int(i) < self.timestamp_begin and int(i) != self.eot]
        return self._bytes(keep).decode("utf-8", errors="replace").strip()

    def _bytes(self, ids: list[int]) -> bytes:
        table = self._byte_of_char
        out = bytearray()
        for i in ids:
            token = self.bpe.id_to_token(i)
            if token is None:
                raise ValueError(f"token id {i}: not in {self.path}")
            if token.startswith("<|") and token.endswith("|>"):  # a special token reads as its name
                out += token.encode()
            else:
                out += bytes(table[c] for c in token)
        return bytes(out)

    @cached_property
    def _byte_of_char(self) -> dict[str, int]:
        """Byte-level BPE's alphabet: each byte is one printable character in the vocabulary
        (GPT-2's: printable Latin-1 bytes stand for themselves, the others for 256 + n)."""
        printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
        chars = {b: chr(b) for b in printable}
        n = 0
        for b in range(256):
            if b not in chars:
                chars[b] = chr(256 + n)
                n += 1
        return {c: b for b, c in chars.items()}

    def __repr__(self) -> str:
        return f"WhisperTokenizer({str(self.path)!r}, multilingual={self.multilingual})"


def whisper_english_normalizer():
    """Whisper's English text normaliser (numbers, British spellings, abbreviations), from the
    ``whisper-normalizer`` package (the 'whisper' extra): a function from text to text."""
    try:
        from whisper_normalizer.english import EnglishTextNormalizer
    except ImportError:
        raise need_whisper_extra("Whisper's English normaliser") from None
    return EnglishTextNormalizer()
