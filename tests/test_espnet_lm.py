"""ESPnet's language models imported (``asr import espnet --lm``): equal to ESPnet's own outputs.

The fixtures (tests/fixtures/espnet_lm/<name>/) were written by ESPnet 202511's own code
(tests/make_espnet_lm_fixtures.py): a small TransformerLM and SequentialRNNLM trained briefly on the
shared LibriSpeech transcripts, their log-probabilities (full forward and step by step), and
Speech2Text's best hypotheses with the trained_100h ASR fixture and the Transformer LM at
lm_weight 0.6 (beam 10, CTC weight 0.3). This test needs only ``asr``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from espnet_equivalence import FIXTURES, build, features_as_alone, utterances

from asr.importers import EspnetImportError
from asr.importers.espnet_lm import import_espnet_lm
from asr.lm import check_lm_fits, load_lm
from asr.text import Tokenizer

LM_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "espnet_lm"
TOL = 1e-4


def imported(name: str, tmp_path: Path):
    return load_lm(import_espnet_lm(tmp_path / name, LM_FIXTURES / name))


@pytest.mark.parametrize("name", ["transformer", "seq_rnn"])
def test_lm_log_probs_equal_espnets(name, tmp_path):
    lm = imported(name, tmp_path)
    ref = torch.load(LM_FIXTURES / name / "espnet_lm_outputs.pt", weights_only=True)
    seqs = json.loads((LM_FIXTURES / name / "espnet_lm_outputs.json").read_text())["tokens"]
    full_max = step_max = 0.0
    with torch.inference_mode():
        for y, theirs_full, theirs_step in zip(seqs, ref["log_probs"], ref["step_log_probs"], strict=True):
            x = torch.tensor([[lm.model.sos_id, *y]])
            ours = torch.log_softmax(lm.model(x)[0].float(), dim=-1)  # (U + 1, V)
            full_max = max(full_max, float((ours - theirs_full).abs().max()))
            cache, rows = lm.model.init_cache(1), []
            for t in range(x.shape[1]):
                lp, cache = lm.model.step(x[:, t], cache)
                rows.append(lp[0])
            step_max = max(step_max, float((torch.stack(rows) - theirs_step).abs().max()))
    print(f"\n{name}: max |log p ours - ESPnet| full forward {full_max:.2e}, step by step {step_max:.2e}")
    assert full_max <= TOL and step_max <= TOL


def test_fused_search_equals_speech2text(data_root, tmp_path):
    """Our batched search with the imported ASR model and LM = Speech2Text one utterance at a time."""
    from asr.config import DecodeConfig
    from asr.decode import recognize

    lm = imported("transformer", tmp_path)
    model, cfg = build(FIXTURES / "trained_100h", "exact")
    asr_tok = Tokenizer.load(import_fixture_tokenizer(tmp_path))
    check_lm_fits(lm, model.vocab_size, asr_tok)  # same ids, piece for piece
    theirs = json.loads((LM_FIXTURES / "transformer" / "espnet_lm_outputs.json").read_text())["hyps"]
    feats, feat_lens = features_as_alone(cfg, data_root, utterances()["search"])  # Speech2Text decodes one at a time
    dcfg = DecodeConfig(beam_size=10, ctc_weight=0.3, length_bonus=0.0, max_len_ratio=0.0, lm_weight=0.6,
                        rules="espnet")
    ours = recognize(model, feats, feat_lens, dcfg, lm=lm.model)
    plain = recognize(model, feats, feat_lens, dcfg.updated(lm_weight=0.0))
    same = sum(o.tokens == t["tokens"] for o, t in zip(ours, theirs, strict=True))
    dscore = max(abs(o.score - t["score"]) for o, t in zip(ours, theirs, strict=True))
    changed = sum(o.tokens != p.tokens for o, p in zip(ours, plain, strict=True))
    print(f"\nlm_weight 0.6: {same}/{len(theirs)} best hypotheses equal to Speech2Text's, max |score diff| "
          f"{dscore:.2e}; the LM changed {changed} of them")  # fmt: skip
    assert same == len(theirs) and dscore <= 1e-3
    assert changed >= 1, "the fixture LM changes no hypothesis: it proves nothing about fusion"
    # the same LM with int8 products (--quantize-lm): not ESPnet's arithmetic, so only measured
    int8 = recognize(model, feats, feat_lens, dcfg, lm=lm.network(quantized=True))
    same8 = sum(o.tokens == t["tokens"] for o, t in zip(int8, theirs, strict=True))
    print(f"with the LM quantized (int8 products): {same8}/{len(theirs)} best hypotheses equal to Speech2Text's")


def import_fixture_tokenizer(tmp_path: Path) -> Path:
    from asr.importers import import_espnet

    return import_espnet(tmp_path / "asr", FIXTURES / "trained_100h") / "tokenizer.model"


def test_unsupported_lm_is_named(tmp_path):
    src = LM_FIXTURES / "seq_rnn" / "exp" / "lm_train"
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg["lm_conf"]["rnn_type"] = "gru"
    bad = tmp_path / "config.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    with pytest.raises(EspnetImportError, match="lm_conf.rnn_type: 'gru' is not supported"):
        import_espnet_lm(tmp_path / "out", LM_FIXTURES / "seq_rnn", config=bad, weights=src / "valid.loss.ave.pth")
    assert not (tmp_path / "out").exists()
