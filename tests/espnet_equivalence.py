"""What ``asr`` computes on an imported ESPnet fixture model, beside what ESPnet computed (the fixture).

Shared by tests/test_espnet_import.py and tests/make_espnet_fixtures.py --check. Needs only ``asr``:
ESPnet's outputs come from the fixture files (tests/fixtures/espnet/<model>/espnet_outputs.*),
written by ESPnet's own code.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import soundfile as sf
import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "espnet"
TOL = 1e-4  # features, encoder output, CTC log-probabilities, decoder logits (max abs difference)
REL_TOL = 1e-5  # losses and accuracy (float32 and float64), gradients in float64 (relative)
F64_GRAD_TOL = 1e-6  # our float64 gradients against ESPnet's, which the fixture keeps rounded to float32 (6e-8)


def float32_gradients_ok(got: dict) -> bool:
    """Our float32 gradients are as close to ESPnet's float64 ones as ESPnet's own float32 gradients
    are (within a factor 2, or 1e-5): the 1e-5 asked for is below float32's reach on these models."""
    return all(got[f"gradients_float32{s}"] <= max(2 * got[f"espnet_float32_gradients{s}"], REL_TOL)
               for s in ("", "_worst_tensor"))
SCORE_TOL = 1e-3


def load_fixture(model_dir: Path) -> dict:
    out = torch.load(model_dir / "espnet_outputs.pt", weights_only=True)
    out.update(json.loads((model_dir / "espnet_outputs.json").read_text()))
    return out


def utterances() -> dict:
    return json.loads((FIXTURES / "utterances.json").read_text())


def read_batch(root: Path, utts: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    wavs = [torch.from_numpy(sf.read(str(root / u["path"]), dtype="float32")[0]) for u in utts]
    lens = torch.tensor([w.numel() for w in wavs])
    batch = torch.zeros(len(wavs), int(lens.max()))
    for i, w in enumerate(wavs):
        batch[i, : w.numel()] = w
    return batch, lens


def import_fixture(model_dir: Path, out: Path) -> Path:
    from asr.importers import import_espnet

    return import_espnet(out, model_dir)


def build(model_dir: Path, padding: str = "exact"):
    """(model in eval mode, config) of the fixture imported into a temporary directory."""
    from asr.checkpoint import MODEL_FILE, safe_load
    from asr.config import load_config
    from asr.model import ASRModel

    with tempfile.TemporaryDirectory() as tmp:
        d = import_fixture(model_dir, Path(tmp) / "model")
        cfg = load_config(d / "config.yaml", [f"model.padding={padding}"])
        model = ASRModel(cfg.model)
        model.load_state_dict(safe_load(d / MODEL_FILE))
    return model.eval(), cfg


def features(cfg, wavs: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from asr.features.espnet import espnet_log_mel

    d = cfg.data
    return espnet_log_mel(wavs, lens, d.sample_rate, d.n_fft, d.win_length, d.hop_length, d.num_mel_bins)


DEEP = 10.0  # nats below a frame's loudest band: features deeper than that are compared with DEEP_TOL
DEEP_TOL = 1e-3


def _masked_max(a: torch.Tensor, b: torch.Tensor, lens: torch.Tensor) -> float:
    keep = torch.arange(a.shape[1]) < lens.unsqueeze(1)  # (B, T): frames that count
    return float((a - b).abs()[keep].max())


def forward_maxima(model_dir: Path, root: Path) -> dict[str, float]:
    """Max |ours - ESPnet's| over real frames/tokens: features, encoder, CTC, decoder (padding: espnet)."""
    ref = load_fixture(model_dir)
    model, cfg = build(model_dir, "espnet")
    wavs, lens = read_batch(root, utterances()["batch"])
    feats, feat_lens = features(cfg, wavs, lens)
    out = {"feat_lens_equal": float(torch.equal(feat_lens, ref["feat_lens"]))}
    if "feats" in ref:  # stored where the frontend differs from small_100h's
        # fp32 cannot resolve a band's power far below its frame's loudest band, and there the fixture keeps
        # the rounding of the CPU it was made on: ESPnet itself, run again on another CPU, lands as far from
        # its own fixture as we do (3.5e-4 on an AMD EPYC against an Intel Xeon's fixture,
        # `tests/make_espnet_fixtures.py --check`). So: within DEEP nats of the frame's peak, and below it.
        real = (torch.arange(feats.shape[1]) < feat_lens.unsqueeze(1)).unsqueeze(2)  # (B, T, 1)
        near = ref["feats"] >= ref["feats"].amax(-1, keepdim=True) - DEEP
        diff = (feats - ref["feats"]).abs()
        out["features"] = float(diff[real & near].max())
        out["features_deep"] = float(diff[real & ~near].max()) if bool((real & ~near).any()) else 0.0
    with torch.no_grad():
        enc, enc_lens = model.encode(feats, feat_lens)
        out["enc_lens_equal"] = float(torch.equal(enc_lens, ref["enc_lens"]))
        out["encoder"] = _masked_max(enc, ref["enc"], enc_lens)
        out["ctc_log_probs"] = _masked_max(model.ctc_log_probs(enc), ref["ctc_logp"], enc_lens)
        tokens, token_lens = _tokens(ref)
        ys_in, _ = model.decoder_io(tokens, token_lens)
        logits = model.decoder(ys_in, enc, enc_lens)
        out["decoder_logits"] = _masked_max(logits, ref["dec_logits"], token_lens + 1)
    return out


def _tokens(ref: dict) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = ref["tokens"].clamp_min(0)  # ESPnet pads with -1, we with 0 (lengths say where the padding is)
    return tokens, ref["token_lens"]


def training_maxima(model_dir: Path, root: Path) -> dict[str, float]:
    """Relative differences of loss, loss_att, loss_ctc, acc (float32) and of all gradients (padding: espnet,
    eval mode: no dropout).

    ESPnet's float32 gradients are themselves 1e-5..2e-4 (relative) off its float64 ones here (float32
    sums in another order), so the gradient reference is ESPnet in float64 on its own float32 features:
    ``gradients_float64`` (ours in float64: ~1e-13 against ESPnet's float64, ~6e-8 against the float32
    rounding of it that the fixture keeps) shows the formulas are the same; ``gradients_float32`` (ours
    in float32) is set beside ``espnet_float32_gradients`` (ESPnet's float32 against the same). Each is
    ||ours - ESPnet's|| / ||ESPnet's|| over all parameters together; ``*_worst_tensor`` the same for
    each tensor alone, its largest. Key biases have no true gradient (softmax ignores a constant added
    to every score), so a tensor's denominator is at least 1e-4 of the largest tensor gradient norm.
    """
    ref = load_fixture(model_dir)
    model, cfg = build(model_dir, "espnet")
    wavs, lens = read_batch(root, utterances()["batch"])
    feats, feat_lens = features(cfg, wavs, lens)
    tokens, token_lens = _tokens(ref)
    out = model(feats, feat_lens, tokens, token_lens)
    out["loss"].backward()
    rel = {}
    for k in ("loss", "loss_att", "loss_ctc", "acc"):
        rel[k] = _rel(float(out[k].detach()), float(ref[k]))
    if "float64" not in ref:  # not stored for the trained model
        return rel
    ref64 = ref["float64"]
    grads32 = _by_espnet_name(model)
    ours64 = ours_on_features(model_dir, feats, feat_lens, tokens, token_lens, torch.float64)
    for k in ("loss", "loss_att", "loss_ctc", "acc"):
        rel[f"{k}_float64"] = _rel(float(ours64[k]), float(ref64[k]))
    for tag, grads in (("float32", grads32), ("float64", ours64["grads"])):
        total, worst, name = _grad_errors(grads, ref64["grads"])
        rel[f"gradients_{tag}"], rel[f"gradients_{tag}_worst_tensor"] = total, worst
        rel[f"worst_tensor_{tag}"] = name  # type: ignore[assignment]
    for k in ("espnet_float32_gradients", "espnet_float32_gradients_worst_tensor"):
        rel[k] = float(ref64[k])  # ESPnet's own float32 gradients against its float64 ones
    rel["espnet_gradients_not_compared"] = len(set(ref64["grads"]) - set(grads32))
    return rel


def _rel(ours: float, theirs: float) -> float:
    return abs(ours - theirs) / max(abs(theirs), 1e-12)


def _by_espnet_name(model) -> dict[str, torch.Tensor]:
    """Our parameters' gradients under ESPnet's names (fused projections split back)."""
    from asr.importers.espnet import _name_map

    params = dict(model.named_parameters())
    return {s: g for o, srcs in _name_map(model.cfg).items()
            for g, s in zip(params[o].grad.chunk(len(srcs), 0), srcs, strict=True)}


def _grad_errors(ours: dict, theirs: dict) -> tuple[float, float, str]:
    floor = 1e-4 * max(float(g.norm()) for g in theirs.values())
    diff_sq = ref_sq = worst = 0.0
    worst_name = ""
    for s, r in theirs.items():
        r = r.double()
        d = float((ours[s].double() - r).norm())
        diff_sq, ref_sq = diff_sq + d * d, ref_sq + float(r.norm()) ** 2
        e = d / max(float(r.norm()), floor)
        if e > worst:
            worst, worst_name = e, s
    return (diff_sq / ref_sq) ** 0.5, worst, worst_name


def features_as_alone(cfg, root: Path, utts: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch of the utterances' features, each exactly as computed alone (Speech2Text's
    batch of one; padding frames only touch frames beyond each utterance's end)."""
    wavs, lens = read_batch(root, utts)
    feats, feat_lens = features(cfg, wavs, lens)
    for i in range(len(lens)):
        f, n = features(cfg, wavs[i : i + 1, : lens[i]], lens[i : i + 1])
        feats[i, : int(n[0])] = f[0]
    return feats, feat_lens


def search_results(model_dir: Path, root: Path, beam: int, rules: str = "espnet") -> list[dict]:
    """Our best hypothesis per search utterance, all decoded in one batch (padding: exact), by
    ``rules`` (espnet: as Speech2Text, maxlenratio 0)."""
    from asr.config import DecodeConfig
    from asr.decode import recognize

    model, cfg = build(model_dir, "exact")
    feats, feat_lens = features_as_alone(cfg, root, utterances()["search"])
    ratio = 0.0 if rules == "espnet" else 1.0
    dcfg = DecodeConfig(beam_size=beam, ctc_weight=0.3, length_bonus=0.0, max_len_ratio=ratio, rules=rules)
    hyps = recognize(model, feats, feat_lens, dcfg)
    return [{"tokens": h.tokens, "score": h.score} for h in hyps]


def compare(model_dir: Path, root: Path) -> dict:
    """Every comparison for one fixture model, as printable maxima; ``ok`` when all are within bounds."""
    report: dict = {}
    fwd = forward_maxima(model_dir, root)
    report.update({k: f"{v:.2e}" for k, v in fwd.items() if not k.endswith("_equal")})
    ok = all(fwd[k] == 1.0 for k in fwd if k.endswith("_equal"))
    ok &= all(v <= TOL for k, v in fwd.items() if not k.endswith(("_equal", "_deep")))
    ok &= fwd.get("features_deep", 0.0) <= DEEP_TOL
    tr = training_maxima(model_dir, root)
    for k, v in tr.items():
        report[f"relative {k}"] = v if isinstance(v, str | int) else f"{v:.2e}"
    ok &= all(v <= REL_TOL for k, v in tr.items() if k.startswith(("loss", "acc")))
    ok &= all(v <= F64_GRAD_TOL for k, v in tr.items() if k.startswith("gradients_float64"))
    if "gradients_float32" in tr:
        ok &= float32_gradients_ok(tr)
    ref = load_fixture(model_dir)
    for beam, theirs in ref["hyps"].items():
        ours = search_results(model_dir, root, int(beam))
        same = sum(o["tokens"] == t["tokens"] for o, t in zip(ours, theirs, strict=True))
        dscore = max(abs(o["score"] - t["score"]) for o, t in zip(ours, theirs, strict=True))
        report[f"beam {beam}: same best hypothesis"] = f"{same}/{len(theirs)}, max |score diff| {dscore:.2e}"
        ok &= same == len(theirs) and dscore <= SCORE_TOL
    report["ok"] = ok
    return report


def compare_published_shapes(published: dict) -> dict:
    """Our parameter shapes for each published configuration against ESPnet's, tensor by tensor."""
    from asr.importers.espnet import _name_map, convert_config
    from asr.model import ASRModel

    out = {}
    for name, entry in published.items():
        esp = dict(entry["espnet_config"])
        esp["token_list"] = ["<blank>", "<unk>"] + [f"t{i}" for i in range(2, entry["vocab_size"] - 1)] + ["<sos/eos>"]
        cfg = convert_config(esp, name)
        model = ASRModel(cfg.model)
        own = dict(model.named_parameters())
        mismatches = []
        covered = set()
        for ours, srcs in _name_map(cfg.model).items():
            if ours not in own:
                continue
            part = [own[ours].shape[0] // len(srcs), *own[ours].shape[1:]]
            for s in srcs:
                covered.add(s)
                if entry["parameters"].get(s) != part:
                    mismatches.append(f"{s}: ESPnet {entry['parameters'].get(s)}, asr {part}")
        uncovered = sorted(set(entry["parameters"]) - covered)
        out[name] = {"espnet": entry["num_parameters"], "asr": model.num_parameters(),
                     "tensors": len(entry["parameters"]), "mismatches": mismatches[:3], "uncovered": uncovered[:3]}
    return out


def ours_on_features(model_dir: Path, feats, feat_lens, tokens, token_lens, dtype=torch.float64) -> dict:
    """Our encoder output, CTC log-probabilities, decoder logits, losses and gradients (by ESPnet's
    parameter names) on given features, in ``dtype`` (padding: espnet; for the float64 check)."""
    model, _ = build(model_dir, "espnet")
    model = model.to(dtype)
    if dtype == torch.float64:
        _float64_cmvn(model, model_dir)
    feats = feats.to(dtype)
    with torch.no_grad():
        enc, enc_lens = model.encode(feats, feat_lens)
        out = {"enc": enc, "enc_lens": enc_lens, "ctc_logp": torch.log_softmax(model.ctc(enc), -1)}
        ys_in, _ = model.decoder_io(tokens, token_lens)
        out["dec_logits"] = model.decoder(ys_in, enc, enc_lens)
    losses = model(feats, feat_lens, tokens, token_lens)
    losses["loss"].backward()
    out.update({k: losses[k].detach() for k in ("loss", "loss_att", "loss_ctc", "acc")})
    out["grads"] = _by_espnet_name(model)
    return out


def _float64_cmvn(model, model_dir: Path) -> None:
    """CMVN from the statistics in float64 (model.pt keeps float32 buffers, rounded at 6e-8)."""
    import numpy as np

    stats = list((model_dir / "exp").glob("*/train/feats_stats.npz"))
    if model.cfg.utterance_cmn or not stats:
        return
    npz = np.load(stats[0])
    mean = torch.from_numpy(npz["sum"] / npz["count"])
    var = torch.from_numpy(npz["sum_square"] / npz["count"]) - mean * mean
    model.cmvn.mean.copy_(mean)
    model.cmvn.istd.copy_(var.clamp_min(1e-20).rsqrt())


def max_differences(ours: dict, theirs: dict, enc_lens, token_lens) -> dict[str, float]:
    """Max |diff| of enc/ctc/decoder over real frames and tokens, relative loss and gradient differences."""
    out = {"encoder": _masked_max(ours["enc"], theirs["enc"], enc_lens),
           "ctc_log_probs": _masked_max(ours["ctc_logp"], theirs["ctc_logp"], enc_lens),
           "decoder_logits": _masked_max(ours["dec_logits"], theirs["dec_logits"], token_lens + 1)}
    for k in ("loss", "loss_att", "loss_ctc", "acc"):
        out[k] = abs(float(ours[k]) - float(theirs[k])) / max(abs(float(theirs[k])), 1e-30)
    out["gradient_worst_tensor"] = max(
        float((ours["grads"][s] - g).norm() / g.norm().clamp_min(1e-30)) for s, g in theirs["grads"].items()
        if "linear_k.bias" not in s  # no true gradient (see training_maxima)
    )
    return out
