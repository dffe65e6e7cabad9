"""Dataset, collate, SpecAugment, filtering, the skip-ratio check and CMVN statistics."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from asr.cli import main
from asr.config import ConfigError, DataConfig, ModelConfig, NoiseConfig, SpecAugmentConfig
from asr.corpora.librispeech import prepare_librispeech
from asr.data.augment import add_noise, augment, freq_warp, spec_augment, tempo_perturb
from asr.data.cmvn import CMVNStats, compute_cmvn_stats
from asr.data.dataset import ASRDataset, DataError, check_skip_ratio, collate
from asr.data.filtering import ctc_min_frames, filter_records
from asr.data.manifest import read_manifest, write_manifest
from asr.features.audio import fbank, fbank_batch, load_audio
from asr.model import ASRModel
from asr.text import Tokenizer, normalize


@pytest.fixture(scope="module")
def libri(data_root, tmp_path_factory) -> tuple[list[dict], Tokenizer]:
    out = tmp_path_factory.mktemp("libri")
    prepare_librispeech(data_root / "LibriSpeech", ["dev-clean", "test-clean"], out, progress=False)
    records = read_manifest(out / "dev-clean.jsonl") + read_manifest(out / "test-clean.jsonl")
    tok = Tokenizer.train([normalize(r["text"]) for r in records], out / "tok", None, "char")
    return records, tok


def test_item_is_fbank_of_the_file_and_tokens_of_the_text(libri) -> None:
    records, tok = libri
    ds = ASRDataset(records, tok, DataConfig(), train=False)
    item = ds[0]
    wav = load_audio(records[0]["audio"])
    assert torch.equal(item["feats"], fbank_batch([wav])[0])
    assert torch.allclose(item["feats"], fbank(wav), atol=2e-3, rtol=0)  # Kaldi-compatible
    assert item["feats"].shape[1] == 80
    assert item["tokens"].tolist() == tok.encode(normalize(records[0]["text"]))
    assert item["duration"] == pytest.approx(records[0]["duration"], abs=1e-3)
    assert ds.durations == [r["duration"] for r in records]
    assert len(ds) == len(records) and all(ds.record(i) == r for i, r in enumerate(records))


def test_segment_offsets_are_honoured(libri, tmp_path) -> None:
    records, tok = libri
    seg = {**records[0], "id": "seg", "offset": 1.0, "end": 2.5, "duration": 1.5}
    item = ASRDataset([seg], tok, DataConfig(), train=False)[0]
    assert torch.equal(item["feats"], fbank_batch([load_audio(seg["audio"], 16000, 1.0, 2.5)])[0])
    assert item["feats"].shape[0] == 148  # 1.5 s: 1 + (24000 - 400) // 160


def test_speed_perturbation_is_per_utterance_per_epoch_and_reproducible(libri) -> None:
    records, tok = libri
    cfg = DataConfig(speed_perturb=[0.9, 1.0, 1.1])
    ds = ASRDataset(records * 10, tok, cfg, train=True, seed=5)
    factors = [[ds.speed_factor(i) for i in range(len(ds))] for ds.epoch in range(3)]
    again = ASRDataset(records * 10, tok, cfg, train=True, seed=5)
    again.set_epoch(2)
    assert [again.speed_factor(i) for i in range(len(again))] == factors[2]  # resume sees the same
    assert factors[0] != factors[1] != factors[2]
    assert set(factors[0]) == {0.9, 1.0, 1.1}
    # the factor really changes the audio: 1.1 is 10% shorter
    ds.set_epoch(0)
    i = factors[0].index(1.1)
    item = ds[i]
    assert item["speed"] == 1.1
    assert item["duration"] == pytest.approx(records[i % len(records)]["duration"] / 1.1, rel=1e-3)
    # evaluation never perturbs
    assert ASRDataset(records, tok, cfg, train=False).speed_factor(0) == 1.0


def test_dither_is_reproducible_and_leaves_global_rng_alone(libri) -> None:
    records, tok = libri
    ds = ASRDataset(records[:1], tok, DataConfig(dither=1.0), train=True)
    state = torch.get_rng_state()
    a, b = ds[0]["feats"], ds[0]["feats"]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b)
    clean = fbank_batch([load_audio(records[0]["audio"])])[0]
    assert not torch.equal(a, clean) and (a - clean).abs().median() < 0.1  # noise, not a different signal
    ds.set_epoch(1)
    assert not torch.equal(ds[0]["feats"], a)
    # no dither outside training
    dev = ASRDataset(records[:1], tok, DataConfig(dither=1.0), train=False)
    assert torch.equal(dev[0]["feats"], clean)


def test_unreadable_audio_is_skipped_logged_and_counted(libri, tmp_path, caplog) -> None:
    records, tok = libri
    bad = tmp_path / "broken.flac"
    bad.write_bytes(b"not audio at all")
    recs = [records[0], {**records[1], "id": "broken-utt", "audio": str(bad)}, records[2]]
    ds = ASRDataset(recs, tok, DataConfig(), train=True)
    with caplog.at_level(logging.WARNING):
        batch = collate([ds[i] for i in range(3)])
    assert "broken-utt" in caplog.text and "broken.flac" in caplog.text
    assert batch.skipped == 1 and batch.ids == [records[0]["id"], records[2]["id"]]
    # through a DataLoader with worker processes
    loader = DataLoader(ds, batch_sampler=[[0, 1], [2]], collate_fn=collate, num_workers=2)
    batches = list(loader)
    assert [b.skipped for b in batches] == [1, 0]
    assert [len(b) for b in batches] == [1, 1]
    empty = collate([None, None])
    assert len(empty) == 0 and empty.skipped == 2 and empty.feats.shape[0] == 0


def test_check_skip_ratio() -> None:
    check_skip_ratio(1, 100, 0.01)  # exactly at the limit is fine
    check_skip_ratio(0, 0, 0.01)
    with pytest.raises(DataError, match=r"epoch 3: 2 of 100 utterances \(2.00%\).*max_skip_ratio=0.01"):
        check_skip_ratio(2, 100, 0.01, what="epoch 3")


def test_collate_pads_with_zeros_and_lengths(libri) -> None:
    records, tok = libri
    items = [ASRDataset(records, tok, DataConfig(), train=False)[i] for i in range(4)]
    batch = collate(items)
    b = len(items)
    t_max = max(it["feats"].shape[0] for it in items)
    u_max = max(it["tokens"].numel() for it in items)
    assert batch.feats.shape == (b, t_max, 80) and batch.tokens.shape == (b, u_max)
    for k, it in enumerate(items):
        n, u = it["feats"].shape[0], it["tokens"].numel()
        assert batch.feat_lens[k] == n and batch.token_lens[k] == u
        assert torch.equal(batch.feats[k, :n], it["feats"]) and not batch.feats[k, n:].any()
        assert torch.equal(batch.tokens[k, :u], it["tokens"]) and not batch.tokens[k, u:].any()
    moved = batch.to("cpu")
    assert moved.ids == batch.ids and torch.equal(moved.feats, batch.feats)


# ------------------------------------------------------------------------------------------- SpecAugment


def _batch(lens: list[int], f: int = 80, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lens_t = torch.tensor(lens)
    x = torch.rand(len(lens), max(lens), f, generator=g) + 1.0  # (B, T, F), never 0 inside
    keep = torch.arange(max(lens)).unsqueeze(0) < lens_t.unsqueeze(1)
    return x * keep.unsqueeze(-1), lens_t


def test_spec_augment_masks_stay_inside_and_within_widths() -> None:
    x, lens = _batch([300, 120, 57])
    cfg = SpecAugmentConfig(freq_masks=2, freq_width=10, time_masks=3, time_width=0.05, time_warp=0)
    for seed in range(20):
        y = spec_augment(x, lens, cfg, torch.Generator().manual_seed(seed))
        assert y.shape == x.shape
        for k, n in enumerate(lens.tolist()):
            z = (y[k, :n] == 0)  # (n, F)
            cols = z.all(0)  # fully masked frequency bins
            rows = z.all(1)  # fully masked frames
            assert int(cols.sum()) <= 2 * 10
            assert int(rows.sum()) <= 3 * int(0.05 * n)
            # every zero is explained by a masked bin or a masked frame
            assert torch.equal(z, cols.unsqueeze(0) | rows.unsqueeze(1))
            assert not y[k, n:].any()  # padding untouched (still zero)
    assert not torch.equal(spec_augment(x, lens, cfg, torch.Generator().manual_seed(1)), x)


def test_spec_augment_is_reproducible_and_pure() -> None:
    x, lens = _batch([200, 150])
    x0 = x.clone()
    cfg = SpecAugmentConfig(freq_masks=2, freq_width=27, time_masks=2, time_width=20, time_warp=5)
    a = spec_augment(x, lens, cfg, torch.Generator().manual_seed(3))
    b = spec_augment(x, lens, cfg, torch.Generator().manual_seed(3))
    c = spec_augment(x, lens, cfg, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(x, x0)  # input not modified
    off = SpecAugmentConfig(freq_masks=0, time_masks=0, time_warp=0)
    assert torch.equal(spec_augment(x, lens, off), x)


def test_time_warp_keeps_ends_and_interpolates() -> None:
    x, lens = _batch([100, 60, 9])  # the last is too short for W=5 and stays as it is
    cfg = SpecAugmentConfig(freq_masks=0, time_masks=0, time_warp=5)
    moved = 0
    for seed in range(10):
        y = spec_augment(x, lens, cfg, torch.Generator().manual_seed(seed))
        for k, n in enumerate(lens.tolist()):
            assert torch.allclose(y[k, 0], x[k, 0]) and torch.allclose(y[k, n - 1], x[k, n - 1])
            assert not y[k, n:].any()
            # each frame is a mix of two neighbouring input frames: inside the per-bin range
            assert (y[k, :n] >= x[k, :n].min(0).values - 1e-5).all()
            assert (y[k, :n] <= x[k, :n].max(0).values + 1e-5).all()
        assert torch.equal(y[2], x[2])
        moved += int(not torch.allclose(y[0], x[0]))
    assert moved >= 5


# --------------------------------------------------------------------------------------------- filtering


def test_ctc_min_frames() -> None:
    assert ctc_min_frames([]) == 0
    assert ctc_min_frames([3, 4, 5]) == 3
    assert ctc_min_frames([3, 3, 3, 4]) == 6  # two blanks between the repeats


def test_filter_records_by_reason(libri, caplog) -> None:
    _, tok = libri
    cfg = DataConfig(max_duration=10.0)
    recs = [
        {"id": "ok", "audio": "-", "duration": 2.0, "text": "HELLO"},
        {"id": "long", "audio": "-", "duration": 12.0, "text": "HELLO"},
        {"id": "short", "audio": "-", "duration": 0.05, "text": "A"},  # 3 fbank frames < 7
        {"id": "empty", "audio": "-", "duration": 1.0, "text": " ... "},
        {"id": "dense", "audio": "-", "duration": 0.5, "text": "ABCDEFGHIJKLMN"},  # 48 frames -> 12 < 15
        {"id": "repeats", "audio": "-", "duration": 0.5, "text": "AAAAAAA"},  # 7 tokens + 6 blanks > 12
        {"id": "fits", "audio": "-", "duration": 0.5, "text": "ABCDEFGHIJ"},  # ▁ + 10 letters: 11 <= 12
    ]
    frontend = ASRModel(ModelConfig(frontend="linear", stack=4, vocab_size=tok.vocab_size, d_model=32, heads=2,
                                    ffn_dim=32, encoder_layers=1, decoder_layers=1))
    with caplog.at_level(logging.INFO):
        kept, counts = filter_records(recs, tok, cfg, min_input_frames=7, encoder_lengths=frontend.encoder_lengths)
    assert [r["id"] for r in kept] == ["ok", "fits"]
    assert dict(counts) == {"too_long": 1, "too_short": 1, "empty_text": 1, "too_many_tokens": 2}
    assert "kept 2 of 7" in caplog.text and "longer than data.max_duration" in caplog.text
    # with speed perturbation the fastest version must still fit: at 1.1, 43 frames -> 10 < 11
    kept, counts = filter_records(recs[-1:], tok, cfg, encoder_lengths=frontend.encoder_lengths,
                                  speed_perturb=[0.9, 1.0, 1.1])
    assert not kept and counts == {"too_many_tokens": 1}


# -------------------------------------------------------------------------------------------------- CMVN


def test_cmvn_stats_match_direct_accumulation(libri, tmp_path) -> None:
    records, _ = libri
    direct = CMVNStats.from_features(fbank_batch([load_audio(r["audio"])])[0] for r in records)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF")
    for workers in (0, 2):
        stats, unreadable = compute_cmvn_stats(records + [{**records[0], "id": "bad", "audio": str(bad)}],
                                               DataConfig(), num_workers=workers, chunk=3, progress=False)
        assert stats.count == direct.count and unreadable == ["bad"]
        assert torch.allclose(stats.sum, direct.sum) and torch.allclose(stats.sum_sq, direct.sum_sq)


def test_cli_cmvn(libri, tmp_path, capsys) -> None:
    records, _ = libri
    write_manifest(tmp_path / "m.jsonl", records[:3])
    rc = main(["cmvn", "--manifest", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "cmvn.json"),
               "--num-workers", "0"])
    assert rc == 0 and "of 3 utterances" in capsys.readouterr().out
    stats = CMVNStats.load(tmp_path / "cmvn.json")
    direct = CMVNStats.from_features(fbank_batch([load_audio(r["audio"])])[0] for r in records[:3])
    assert stats.count == direct.count and torch.allclose(stats.sum, direct.sum)
    data = json.loads(Path(tmp_path / "cmvn.json").read_text())
    assert len(data["mean"]) == 80


def test_cli_tokenizer(libri, tmp_path, capsys) -> None:
    records, _ = libri
    write_manifest(tmp_path / "m.jsonl", records)
    rc = main(["tokenizer", "--manifest", str(tmp_path / "m.jsonl"), "--vocab-size", "40", "--model-type", "bpe",
               "--out", str(tmp_path / "tok")])
    assert rc == 0 and "40 ids" in capsys.readouterr().out
    assert Tokenizer.load(tmp_path / "tok").vocab_size == 40
    assert main(["tokenizer", "--manifest", str(tmp_path / "m.jsonl"), "--vocab-size", "100000",
                 "--out", str(tmp_path / "big")]) == 2
    assert "too large" in capsys.readouterr().err


def test_feature_cache_returns_the_same_items_and_computes_each_once(libri, monkeypatch) -> None:
    records, tok = libri
    cfg = DataConfig(speed_perturb=[0.9, 1.0, 1.1], cache_features=True, num_workers=0)
    plain = ASRDataset(records, tok, DataConfig(speed_perturb=[0.9, 1.0, 1.1]), train=True)
    cached = ASRDataset(records, tok, cfg, train=True)
    import asr.data.dataset as dataset_module

    calls, reads = [], []
    real, real_load = dataset_module.compute_features, dataset_module.load_audio
    monkeypatch.setattr(dataset_module, "compute_features", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(dataset_module, "load_audio", lambda *a, **k: reads.append(a[0]) or real_load(*a, **k))
    for epoch in range(4):
        plain.set_epoch(epoch)
        cached.set_epoch(epoch)
        for i in range(len(records)):
            a, b = plain[i], cached[i]
            assert torch.equal(a["feats"], b["feats"]) and a["speed"] == b["speed"]
            assert a["duration"] == b["duration"] and torch.equal(a["tokens"], b["tokens"])
    distinct = len(cached._cache)
    assert distinct < 4 * len(records), "some (utterance, speed) pairs must repeat across 4 epochs"
    assert len(calls) == 4 * len(records) + distinct  # the plain dataset every time, the cached one once per pair
    # the audio: the plain dataset reads it every time, the cached one once per utterance, and lets it
    # go when all three speeds of it are cached
    assert len(reads) == 4 * len(records) + len(records)
    complete = {i for i in range(len(records)) if all((i, f) in cached._cache for f in (0.9, 1.0, 1.1))}
    assert set(cached._waves) == set(range(len(records))) - complete
    for epoch in range(4, 40):  # until every speed of every utterance is cached
        cached.set_epoch(epoch)
        for i in range(len(records)):
            cached[i]
    assert len(cached._cache) == 3 * len(records) and not cached._waves
    assert len(reads) == 5 * len(records)


def test_freq_warp_moves_a_tone_like_a_higher_tone() -> None:
    """VTLP by alpha turns the fbank of a 1 kHz tone into (nearly) the fbank of an alpha kHz tone."""
    sr = 8000
    t = torch.arange(sr) / sr

    def tone_fbank(hz: float) -> torch.Tensor:
        return fbank(0.5 * torch.sin(2 * torch.pi * hz * t), sr, num_mel_bins=40)

    x = tone_fbank(1000.0).unsqueeze(0).repeat(3, 1, 1)  # (3, T, 40)
    y = freq_warp(x, torch.tensor([1.0, 1.15, 0.87]), sr)
    assert torch.allclose(y[0], x[0], atol=1e-4)  # alpha 1: unchanged
    for k, hz in ((1, 1150.0), (2, 870.0)):
        want = tone_fbank(hz)[50]
        got = y[k, 50]
        assert int(got.argmax()) == int(want.argmax()) != int(x[0, 50].argmax())
        assert torch.corrcoef(torch.stack([got, want]))[0, 1] > 0.97


def _ramp(lens: list[int], f: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame t of each utterance holds the value t + 1 in every bin (0 in the padding)."""
    lens_t = torch.tensor(lens)
    t = torch.arange(max(lens), dtype=torch.float32) + 1
    x = (t.view(1, -1, 1) * (t.view(1, -1) <= lens_t.unsqueeze(1)).unsqueeze(-1)).expand(-1, -1, f)
    return x.contiguous(), lens_t


def test_tempo_perturb_stretches_each_piece_by_its_own_rate() -> None:
    x, lens = _ramp([200, 120, 37])
    w, span = 0.5, 40
    y, new = tempo_perturb(x, lens, w, span, torch.Generator().manual_seed(0))
    assert torch.equal(x, _ramp([200, 120, 37])[0])  # input untouched
    assert y.shape[1] == int(new.max()) and y.shape[2] == x.shape[2]
    slopes = []
    for k, (n, m) in enumerate(zip(lens.tolist(), new.tolist(), strict=True)):
        assert n / (1 + w) - 1 <= m <= n * (1 + w) + 1
        src = y[k, :m, 0] - 1  # the input frame each output frame was read at
        assert src[0] == 0 and n - 1 - (1 + w) <= src[-1] <= n - 1
        assert not y[k, m:].any()  # padding stays zero
        step = src.diff()
        assert (step >= 0).all() and (step <= 1 + w + 1e-4).all()  # monotone, rate-bounded
        step = step[:-1]  # the last frame is held at the utterance's end
        assert (step >= 1 / (1 + w) - 1e-4).all()
        slopes += step.tolist()
    assert max(slopes) / min(slopes) > 1.5  # pieces get different rates
    # one piece (span >= length): one rate over the whole utterance, a uniform stretch
    y1, new1 = tempo_perturb(x[:1], lens[:1], w, 1000, torch.Generator().manual_seed(1))
    step1 = y1[0, : int(new1[0]), 0].diff()
    assert torch.allclose(step1, step1[0].expand_as(step1), atol=1e-4)
    assert abs(int(new1[0]) - 200 / float(step1[0])) <= 1


def test_tempo_perturb_is_reproducible_and_off_at_zero() -> None:
    x, lens = _batch([90, 64, 20], f=8)
    a = tempo_perturb(x, lens, 0.3, 16, torch.Generator().manual_seed(5))
    b = tempo_perturb(x, lens, 0.3, 16, torch.Generator().manual_seed(5))
    c = tempo_perturb(x, lens, 0.3, 16, torch.Generator().manual_seed(6))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])
    y, n = tempo_perturb(x, lens, 0.0, 16)
    assert torch.equal(y, x) and torch.equal(n, lens)
    with pytest.raises(ConfigError, match="tempo"):
        SpecAugmentConfig(tempo=1.0).validate()
    with pytest.raises(ConfigError, match="tempo_span"):
        SpecAugmentConfig(tempo_span=0).validate()


def test_add_noise_adds_power_at_the_drawn_snr(data_root) -> None:
    wavs = [load_audio(p, 8000) for p in sorted((data_root / "fsdd" / "recordings").glob("*_lucas_1.wav"))[:4]]
    x = pad_sequence(fbank_batch(wavs, 8000, 40), batch_first=True)
    lens = torch.tensor([len(w) // 80 - 1 for w in wavs])
    cfg = NoiseConfig(prob=1.0, snr_min=12.0, snr_max=12.0)
    y = add_noise(x, lens, cfg, 8000, torch.Generator().manual_seed(0))
    for k, n in enumerate(lens.tolist()):
        added = y[k, :n].exp() - x[k, :n].exp()
        assert (added > 0).all()  # power only added, never removed
        snr = 10 * torch.log10(x[k, :n].exp().mean() / added.mean())
        assert abs(float(snr) - 12.0) < 0.01
        assert torch.equal(y[k, n:], x[k, n:])  # padding as it was
    again = add_noise(x, lens, cfg, 8000, torch.Generator().manual_seed(0))
    assert torch.equal(again, y)
    assert torch.equal(add_noise(x, lens, NoiseConfig(prob=0.0), 8000), x)


def test_add_noise_draws_colour_and_share_per_utterance() -> None:
    b, t, f = 32, 200, 40
    x = torch.full((b, t, f), -30.0)
    lens = torch.full((b,), t)
    y = add_noise(x, lens, NoiseConfig(prob=0.5, tilt_db=20.0, peak_db=0.0), 8000, torch.Generator().manual_seed(3))
    touched = (y != x).flatten(1).any(1)
    assert 6 <= int(touched.sum()) <= 26  # about half
    added = y[touched].exp() - x[touched].exp()  # (n, T, F) the noise's power
    band_db = 10 / math.log(10) * added.mean(1).log()  # (n, F) its mean power per band, dB
    slope = band_db[:, -8:].mean(1) - band_db[:, :8].mean(1)
    assert slope.max() - slope.min() > 10  # tilted both ways: white noise recoloured per utterance
    frames = added[:, :, 20].log()
    assert (frames.std(1) > 0.2).all()  # each band fluctuates frame to frame, as noise does
    with pytest.raises(ConfigError, match=r"data\.noise\.snr_max"):
        DataConfig(noise=NoiseConfig(snr_min=10, snr_max=5)).validate()


def test_spec_augment_freq_warp_draws_per_utterance_and_needs_the_sample_rate() -> None:
    x, lens = _batch([120, 80, 60], f=40)
    cfg = SpecAugmentConfig(freq_masks=0, time_masks=0, time_warp=0, freq_warp=0.1)
    with pytest.raises(ValueError, match="sample_rate"):
        spec_augment(x, lens, cfg, torch.Generator().manual_seed(0))
    a = spec_augment(x, lens, cfg, torch.Generator().manual_seed(0), sample_rate=8000)
    b = spec_augment(x, lens, cfg, torch.Generator().manual_seed(0), sample_rate=8000)
    assert torch.equal(a, b) and not torch.equal(a, x)
    assert (a >= x.amin(2, keepdim=True) - 1e-6).all() and (a <= x.amax(2, keepdim=True) + 1e-6).all()
    for k, n in enumerate(lens.tolist()):
        assert not a[k, n:].any()  # padding stays zero
    with pytest.raises(ConfigError, match="freq_warp"):
        SpecAugmentConfig(freq_warp=0.6).validate()


def test_augment_applies_tempo_noise_and_specaugment_in_order() -> None:
    """augment() is what the loop calls: the same draws, in the same order, as the three steps by hand."""
    from asr.config import DataConfig

    x, lens = torch.randn(3, 120, 40) * 2 + 5, torch.tensor([120, 90, 60])
    cfg = DataConfig(num_mel_bins=40, sample_rate=8000, noise=NoiseConfig(prob=0.8),
                     specaugment=SpecAugmentConfig(freq_width=8, tempo=0.3, tempo_span=20))  # fmt: skip
    y, ylens = augment(x, lens, cfg, torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    ref, rlens = tempo_perturb(x, lens, 0.3, 20, g)
    ref = spec_augment(add_noise(ref, rlens, cfg.noise, 8000, g), rlens, cfg.specaugment, g, 8000)
    assert torch.equal(y, ref) and torch.equal(ylens, rlens)
    off = DataConfig(num_mel_bins=40, specaugment=None)
    assert augment(x, lens, off)[0] is x
