"""Decode a manifest: batches by duration, features in DataLoader workers, results as JSON Lines."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from asr.config import DecodeConfig
from asr.data.sampler import duration_to_frames, pack_batches
from asr.inference.recognizer import Recognizer

__all__ = ["DecodeStats", "duration_batches", "decode_manifest"]

log = logging.getLogger(__name__)


@dataclass
class DecodeStats:
    """What a corpus decode did: counts, audio seconds, wall seconds and the real-time factor."""

    decoded: int = 0
    failed: list[str] = field(default_factory=list)
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0

    @property
    def rtf(self) -> float:
        return self.wall_seconds / self.audio_seconds if self.audio_seconds else float("nan")


def duration_batches(durations: list[float], max_frames: int, max_utterances: int) -> list[list[int]]:
    """Indices grouped longest first so that each batch holds at most ``max_frames`` fbank frames
    (10 ms) including padding, and at most ``max_utterances`` utterances."""
    order = sorted(range(len(durations)), key=lambda i: -durations[i])
    return pack_batches(order, [duration_to_frames(d) for d in durations], max_frames, max_utterances)


def decode_manifest(
    rec: Recognizer,
    records: list[dict[str, Any]],
    out_path: str | os.PathLike,
    cfg: DecodeConfig,
    max_frames: int | None = None,
    max_utterances: int = 64,
    num_workers: int = 2,
    progress: bool = True,
) -> DecodeStats:
    """Decode ``records`` (manifest entries) with the recogniser ``rec`` and write ``{"id", "text", "score"}`` lines to
    ``out_path`` as each batch finishes (flushed, so a crash keeps finished work). With ``cfg.speeds``
    every batch is read at each speed and decoded as one test-time ensemble (``asr.decode.speeds``);
    else once, at ``cfg.speed``.

    Unreadable audio is logged by id and listed in ``DecodeStats.failed``; the rest still run.
    """
    from asr.data.dataset import ASRDataset, collate

    dev = rec.device
    data_cfg = dataclasses.replace(rec.config.data, cache_features=False)  # each utterance is read once
    speeds = cfg.speeds or [cfg.speed]  # decode.speeds: one view of every utterance per speed
    views = [ASRDataset([{**r, "speed": f} for r in records], rec.tokenizer, data_cfg, train=False) for f in speeds]
    as_recorded = views[0].durations  # the manifest's: RTF is per second of audio as recorded
    slowest = min(1.0, *speeds)  # the longest features, that a batch's frame budget must hold
    batches = duration_batches([d / slowest for d in as_recorded], max_frames or cfg.max_frames, max_utterances)
    loaders = [torch.utils.data.DataLoader(
        ds, batch_sampler=batches, collate_fn=collate, num_workers=num_workers, pin_memory=dev.type == "cuda"
    ) for ds in views]  # fmt: skip
    stats = DecodeStats()
    seen: set[str] = set()
    t0 = time.perf_counter()
    bar = tqdm(total=len(records), unit="utt", disable=not progress, dynamic_ncols=True)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as out:
        for k, group in enumerate(zip(*loaders, strict=True)):  # the same utterances, at each speed
            ids = list(dict.fromkeys(uid for b in group for uid in b.ids))  # readable at one speed at least
            if len(group) == 1:
                one = rec.recognize(group[0].feats, group[0].feat_lens, cfg) if ids else []
                hyps = dict(zip(ids, one, strict=True))
            else:
                hyps = rec.recognize_views([(b.ids, b.feats, b.feat_lens) for b in group if b.ids], cfg)
            for uid in ids:
                h = hyps[uid]
                text = rec.text(h.tokens)
                out.write(json.dumps({"id": uid, "text": text, "score": round(h.score, 4)}, ensure_ascii=False) + "\n")
                seen.add(uid)
            out.flush()
            stats.audio_seconds += sum(as_recorded[i] for i in batches[k] if records[i]["id"] in hyps)
            stats.decoded += len(ids)
            bar.update(len(batches[k]))
            bar.set_postfix(rtf=f"{(time.perf_counter() - t0) / max(stats.audio_seconds, 1e-9):.3f}")
    bar.close()
    stats.wall_seconds = time.perf_counter() - t0
    stats.failed = [r["id"] for r in records if r["id"] not in seen]
    if stats.failed:
        log.warning("%d utterances could not be read and have no hypothesis: %s", len(stats.failed), stats.failed[:10])
    return stats
