"""Pseudo-labels: untranscribed utterances with a decoding's hypotheses as their transcripts.

Unsupervised adaptation to a new speaker (or domain) in two passes, the idea of Kaldi's speaker-adapted
second pass with training in place of fMLLR: decode his audio, fine-tune the model on that audio with
its own hypotheses as targets (``asr train --set train.init=MODEL --set data.train=PSEUDO``), decode
again. No reference transcript is read: the records keep only what locates the audio and the speaker,
so a corpus key that names the words (FSDD's ``takes``) cannot leak into the targets.

    asr pseudo-label --manifest data/test.jsonl --hyp exp/m/avg5/decode_test/hyp.jsonl --out pseudo.jsonl
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from asr.data.manifest import ManifestError, read_manifest, write_manifest
from asr.scoring import read_transcripts

__all__ = ["PseudoLabelStats", "pseudo_label"]

log = logging.getLogger(__name__)

KEPT_KEYS = ("id", "audio", "duration", "offset", "end", "speaker")  # where the audio is and who speaks


@dataclass
class PseudoLabelStats:
    written: int = 0
    no_hypothesis: list[str] = field(default_factory=list)  # utterances the decoding did not produce
    empty: list[str] = field(default_factory=list)  # decoded to nothing: no target to train on


def pseudo_label(manifest: str | os.PathLike, hyp: str | os.PathLike, out: str | os.PathLike) -> PseudoLabelStats:
    """Write ``out``: the utterances of ``manifest`` with the text of ``hyp`` (``asr decode``'s output).

    An utterance without a hypothesis, or whose hypothesis is empty, is left out, logged by id and counted;
    a hypothesis whose id is not in the manifest is an error (the decoding was of another manifest), and so is
    a malformed line or a repeated id in ``hyp`` (read as ``asr score`` reads it: ``asr.scoring.read_transcripts``)."""
    records = read_manifest(manifest)
    hyps = read_transcripts(hyp)
    known = {r["id"] for r in records}
    foreign = [uid for uid in hyps if uid not in known]
    if foreign:
        raise ManifestError(f"{hyp}: {len(foreign)} hypotheses have ids that {manifest} does not hold "
                            f"(e.g. {foreign[0]!r}): a decoding of another manifest?")  # fmt: skip
    stats = PseudoLabelStats()
    kept = []
    for r in records:
        text = hyps.get(r["id"])
        if text is None:
            stats.no_hypothesis.append(r["id"])
        elif not text.strip():
            stats.empty.append(r["id"])
        else:
            kept.append({**{k: r[k] for k in KEPT_KEYS if k in r}, "text": text})
    for what, ids in (("have no hypothesis in " + str(hyp), stats.no_hypothesis), ("decoded to nothing", stats.empty)):
        if ids:
            log.warning("%d utterances %s, left out: %s%s", len(ids), what, ", ".join(ids[:10]),
                        " ..." if len(ids) > 10 else "")  # fmt: skip
    if not kept:
        raise ManifestError(f"{hyp}: no utterance of {manifest} has a non-empty hypothesis: nothing to adapt on")
    stats.written = write_manifest(out, kept)
    return stats
