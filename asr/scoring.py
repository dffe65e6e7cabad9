"""Word and character error rates with alignments, confusions and a bootstrap interval.

Transcripts come from JSON Lines (manifests or ``asr decode`` output: ``id`` and ``text``) or
Kaldi ``text`` files (``uttid word word ...``). Both sides are normalised the same way
(``asr.text.normalize``) before counting. Alignments are minimum edit distance paths with the
tie-breaking of rapidfuzz (what jiwer uses), so substitution/deletion/insertion counts equal
jiwer's on the same text. A reference id missing from the hypotheses counts as all deletions;
hypothesis ids with no reference are listed and not scored.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ScoringError", "read_transcripts", "edit_distance", "align", "UttScore", "ScoreResult", "score"]


class ScoringError(ValueError):
    """An unreadable transcript file; the message names the file and line."""


def read_transcripts(path: str | os.PathLike) -> dict[str, str]:
    """``{id: text}`` from JSON Lines (objects with ``id`` and ``text``) or a Kaldi ``text`` file.

    The format is taken from the first non-blank line (``{`` starts JSON). Duplicate ids, lines
    without an id and JSON objects without ``text`` raise :class:`ScoringError`.
    """
    p = Path(path)
    if not p.is_file():
        raise ScoringError(f"{p}: no such file")
    out: dict[str, str] = {}
    is_json: bool | None = None
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            s = line.strip()
            if not s:
                continue
            where = f"{p}:{lineno}"
            if is_json is None:
                is_json = s.startswith("{")
            if is_json:
                try:
                    rec = json.loads(s)
                except json.JSONDecodeError as e:
                    raise ScoringError(f"{where}: not valid JSON ({e.msg})") from None
                if not isinstance(rec, dict) or "id" not in rec or "text" not in rec:
                    raise ScoringError(f"{where}: expected an object with 'id' and 'text'")
                uid, text = str(rec["id"]), rec["text"]
                if not isinstance(text, str):
                    raise ScoringError(f"{where}: 'text' must be a string, got {text!r}")
            else:
                parts = s.split(maxsplit=1)
                uid, text = parts[0], parts[1] if len(parts) > 1 else ""
            if uid in out:
                raise ScoringError(f"{where}: duplicate id {uid!r}")
            out[uid] = text
    return out


def _distance_matrix(ref: list, hyp: list) -> np.ndarray:
    """Levenshtein matrix D (len(ref) + 1, len(hyp) + 1); each row is vectorised, the insertion
    chain along a row by a running minimum."""
    vocab: dict[Any, int] = {}
    r = np.array([vocab.setdefault(w, len(vocab)) for w in ref], dtype=np.int64)
    h = np.array([vocab.setdefault(w, len(vocab)) for w in hyp], dtype=np.int64)
    m = len(h)
    j = np.arange(m + 1)
    d = np.empty((len(r) + 1, m + 1), dtype=np.int64)
    d[0] = j
    for i in range(1, len(r) + 1):
        prev = d[i - 1]
        best = prev + 1  # deletion of ref[i-1]
        best[1:] = np.minimum(best[1:], prev[:-1] + (h != r[i - 1]))  # match / substitution
        d[i] = np.minimum.accumulate(best - j) + j  # insertions along the row
    return d


def edit_distance(ref: list | str, hyp: list | str) -> int:
    """Minimum number of substitutions, deletions and insertions turning ``ref`` into ``hyp``."""
    if not ref or not hyp:
        return max(len(ref), len(hyp))
    return int(_distance_matrix(list(ref), list(hyp))[-1, -1])


def align(ref: list[str], hyp: list[str]) -> list[tuple[str, str | None, str | None]]:
    """A minimum-edit alignment as (op, ref word, hyp word), op in ``= S D I``.

    Ties are broken as rapidfuzz's ``editops`` does (walking back from the end: deletion, then
    insertion, then match/substitution), which makes the counts equal jiwer's.
    """
    d = _distance_matrix(ref, hyp)
    i, j = len(ref), len(hyp)
    ops: list[tuple[str, str | None, str | None]] = []
    while i > 0 and j > 0:
        if d[i, j] == d[i - 1, j] + 1:
            ops.append(("D", ref[i - 1], None))
            i -= 1
        elif d[i - 1, j - 1] == d[i, j - 1] + 1:
            ops.append(("I", None, hyp[j - 1]))
            j -= 1
        else:
            ops.append(("=" if ref[i - 1] == hyp[j - 1] else "S", ref[i - 1], hyp[j - 1]))
            i, j = i - 1, j - 1
    ops.extend(("D", ref[k], None) for k in range(i - 1, -1, -1))
    ops.extend(("I", None, hyp[k]) for k in range(j - 1, -1, -1))
    return ops[::-1]


@dataclass
class UttScore:
    """One utterance: its normalised texts, alignment and counts."""

    id: str
    ref: str
    hyp: str
    ops: list[tuple[str, str | None, str | None]]
    sub: int
    dels: int
    ins: int
    words: int
    char_errors: int
    chars: int
    missing: bool = False

    @property
    def errors(self) -> int:
        return self.sub + self.dels + self.ins


@dataclass
class ScoreResult:
    """Corpus totals; rates in percent. ``missing``: reference ids without a hypothesis (scored as
    deletions); ``extra``: hypothesis ids without a reference (not scored)."""

    utts: list[UttScore]
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    ci: tuple[float, float] = (float("nan"), float("nan"))
    ci_level: float = 0.95

    @property
    def sub(self) -> int:
        return sum(u.sub for u in self.utts)

    @property
    def dels(self) -> int:
        return sum(u.dels for u in self.utts)

    @property
    def ins(self) -> int:
        return sum(u.ins for u in self.utts)

    @property
    def words(self) -> int:
        return sum(u.words for u in self.utts)

    @property
    def sentences(self) -> int:
        return len(self.utts)

    @property
    def wer(self) -> float:
        return _rate(self.sub + self.dels + self.ins, self.words)

    @property
    def cer(self) -> float:
        return _rate(sum(u.char_errors for u in self.utts), sum(u.chars for u in self.utts))

    @property
    def ser(self) -> float:
        return _rate(sum(u.errors > 0 for u in self.utts), len(self.utts))

    def to_dict(self) -> dict[str, Any]:
        """Everything ``asr score --json`` prints."""
        return {
            "wer": round(self.wer, 4),
            "cer": round(self.cer, 4),
            "ser": round(self.ser, 4),
            "sub": self.sub,
            "del": self.dels,
            "ins": self.ins,
            "words": self.words,
            "chars": sum(u.chars for u in self.utts),
            "sentences": self.sentences,
            "sentence_errors": sum(u.errors > 0 for u in self.utts),
            "wer_ci95": [round(self.ci[0], 4), round(self.ci[1], 4)],
            "missing": self.missing,
            "extra": self.extra,
        }

    def summary(self) -> str:
        """A few human-readable lines (sclite's headline numbers)."""
        lo, hi = self.ci
        lines = [
            f"WER {self.wer:.2f}% [{self.sub + self.dels + self.ins} / {self.words}, "
            f"{self.sub} sub, {self.dels} del, {self.ins} ins]  "
            f"{self.ci_level:.0%} CI {lo:.2f}-{hi:.2f}%",
            f"CER {self.cer:.2f}%   SER {self.ser:.2f}% [{sum(u.errors > 0 for u in self.utts)} / {self.sentences}]",
        ]
        if self.missing:
            lines.append(
                f"{len(self.missing)} reference ids have no hypothesis (scored as deletions): " + _preview(self.missing)
            )
        if self.extra:
            lines.append(f"{len(self.extra)} hypothesis ids have no reference (not scored): " + _preview(self.extra))
        return "\n".join(lines)

    def confusions(self, top: int = 20) -> dict[str, list[tuple[Any, int]]]:
        """The most frequent substitution pairs, deleted words and inserted words."""
        sub, dels, ins = Counter(), Counter(), Counter()
        for u in self.utts:
            for op, r, h in u.ops:
                if op == "S":
                    sub[(r, h)] += 1
                elif op == "D":
                    dels[r] += 1
                elif op == "I":
                    ins[h] += 1
        return {
            "substitutions": sub.most_common(top),
            "deletions": dels.most_common(top),
            "insertions": ins.most_common(top),
        }

    def report(self, top: int = 20) -> str:
        """Per-utterance alignments (errors in lower case under/over ``*``) and the top confusions."""
        out = [self.summary(), ""]
        for u in self.utts:
            status = "MISSING HYPOTHESIS" if u.missing else f"S={u.sub} D={u.dels} I={u.ins} N={u.words}"
            out.append(f"id: {u.id}  {status}")
            ref_line, hyp_line, mark_line = [], [], []
            for op, r, h in u.ops:
                r_s = r if r is not None else "*" * len(h or "")
                h_s = h if h is not None else "*" * len(r or "")
                if op != "=":
                    r_s, h_s = r_s.lower() if r is not None else r_s, h_s.lower() if h is not None else h_s
                width = max(len(r_s), len(h_s))
                ref_line.append(r_s.ljust(width))
                hyp_line.append(h_s.ljust(width))
                mark_line.append(("" if op == "=" else op).ljust(width))
            out += [
                "REF: " + " ".join(ref_line),
                "HYP: " + " ".join(hyp_line),
                "     " + " ".join(mark_line).rstrip(),
                "",
            ]
        conf = self.confusions(top)
        out.append(f"TOP {top} SUBSTITUTIONS (ref -> hyp: count)")
        out += [f"  {r} -> {h}: {n}" for (r, h), n in conf["substitutions"]]
        out.append(f"TOP {top} DELETIONS")
        out += [f"  {w}: {n}" for w, n in conf["deletions"]]
        out.append(f"TOP {top} INSERTIONS")
        out += [f"  {w}: {n}" for w, n in conf["insertions"]]
        if self.extra:
            out.append("HYPOTHESIS IDS WITHOUT A REFERENCE (not scored)")
            out += [f"  {x}" for x in self.extra]
        return "\n".join(out) + "\n"


def _rate(num: float, den: float) -> float:
    return 100.0 * num / den if den else (0.0 if num == 0 else float("inf"))


def _preview(ids: list[str], n: int = 5) -> str:
    return ", ".join(ids[:n]) + (f", ... ({len(ids) - n} more)" if len(ids) > n else "")


def score_utterance(uid: str, ref: str, hyp: str, missing: bool = False) -> UttScore:
    """Counts and alignment of one (already normalised) pair."""
    rw, hw = ref.split(), hyp.split()
    ops = align(rw, hw)
    c = Counter(op for op, _, _ in ops)
    return UttScore(uid, ref, hyp, ops, c["S"], c["D"], c["I"], len(rw), edit_distance(ref, hyp), len(ref), missing)


def bootstrap_ci(
    errors: np.ndarray, words: np.ndarray, level: float = 0.95, samples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the corpus WER (percent), resampling utterances
    (Bisani & Ney 2004)."""
    n = len(errors)
    if n == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(samples, n))
    w = words[idx].sum(1)
    rates = 100.0 * errors[idx].sum(1) / np.maximum(w, 1)
    a = (1 - level) / 2
    return float(np.quantile(rates, a)), float(np.quantile(rates, 1 - a))


def score(
    refs: dict[str, str],
    hyps: dict[str, str],
    normalizer: str | None = "librispeech",
    bootstrap: int = 1000,
    seed: int = 0,
) -> ScoreResult:
    """Score hypotheses against references (``{id: text}`` each), in reference order.

    ``normalizer``: an ``asr.text`` normaliser name applied to both sides (None: whitespace only).
    """
    from asr.text import normalize

    def norm(t: str) -> str:
        return normalize(t, normalizer) if normalizer else " ".join(t.split())

    utts, missing = [], []
    for uid, ref in refs.items():
        if uid not in hyps:
            missing.append(uid)
        utts.append(score_utterance(uid, norm(ref), norm(hyps.get(uid, "")), missing=uid not in hyps))
    extra = [uid for uid in hyps if uid not in refs]
    errors = np.array([u.errors for u in utts], dtype=np.int64)
    words = np.array([u.words for u in utts], dtype=np.int64)
    ci = bootstrap_ci(errors, words, samples=bootstrap, seed=seed) if bootstrap > 0 else (float("nan"),) * 2
    return ScoreResult(utts, missing, extra, ci)
