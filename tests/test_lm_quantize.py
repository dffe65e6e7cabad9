"""int8 products for an LM (``asr.lm.quantize``): exact integers on this CPU, the definition, rows
independent of their batch, every product of both LMs converted, the original left alone.

Fusion with the quantized LM (cache = full forward, batch = alone, lm_weight 0, every mode) is
tested in ``tests/test_lm_fusion.py`` (its ``transformer_int8`` LM); its effect on real speech in
``tests/test_lm_real_speech.py``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from asr.lm import LMConfig, build_lm
from asr.lm.quantize import INPUT_MAX, WEIGHT_MAX, Int8Linear, quantize_lm


def test_int8_products_are_exact_at_the_worst_case():
    """Inputs at +-127 against weights at +-64 in every position: the int32 sums equal the exact
    product (without VNNI, weights of 127 saturate oneDNN's 16-bit pair sums; see the module)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-INPUT_MAX, INPUT_MAX + 1, (37, 512), generator=g, dtype=torch.int8)
    w = torch.randint(-WEIGHT_MAX, WEIGHT_MAX + 1, (300, 512), generator=g, dtype=torch.int8)
    x[:4], w[:4] = INPUT_MAX, WEIGHT_MAX  # the largest sums of either sign
    x[4:8], w[4:8] = -INPUT_MAX, -WEIGHT_MAX
    x[8:12], w[8:12] = INPUT_MAX, -WEIGHT_MAX
    exact = x.double() @ w.double().t()
    assert torch.equal(torch._int_mm(x, w.t()).double(), exact)


def test_int8_linear_is_its_definition_and_close_to_the_linear():
    torch.manual_seed(0)
    linear = nn.Linear(256, 300)
    q = Int8Linear.from_linear(linear)
    x = torch.randn(20, 7, 256) * torch.rand(20, 7, 1) * 5  # rows of different ranges
    w = linear.weight.detach().double()
    w_scale = w.abs().amax(1) / WEIGHT_MAX
    x2 = x.reshape(-1, 256).double()
    x_scale = x2.abs().amax(1, keepdim=True) / INPUT_MAX
    ref = (torch.round(x2 / x_scale) @ torch.round(w / w_scale[:, None]).t()) * x_scale * w_scale
    ref = (ref + linear.bias.detach().double()).view(20, 7, 300)
    with torch.inference_mode():
        got, full = q(x), linear(x)
    assert got.dtype == torch.float32 and got.shape == full.shape
    assert torch.allclose(got.double(), ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    assert float((got - full).abs().max()) < 0.03 * float(full.abs().max())  # measured: about 1%


def test_each_row_is_independent_of_its_batch():
    torch.manual_seed(1)
    q = Int8Linear.from_linear(nn.Linear(64, 48))
    x = torch.randn(16, 64)
    x[3] *= 100  # one row with a much larger range does not move the others' scales
    with torch.inference_mode():
        batch = q(x)
        for i in range(16):
            assert torch.equal(q(x[i : i + 1])[0], batch[i]), f"row {i}"


@pytest.mark.parametrize("kind,tie", [("transformer", False), ("transformer", True), ("lstm", False)])
def test_quantize_lm_converts_every_product_and_leaves_the_lm_alone(kind, tie):
    torch.manual_seed(2)
    lm = build_lm(LMConfig(type=kind, vocab_size=40, d_model=32, heads=4, ffn_dim=64, layers=2, dropout=0.0,
                           tie_output=tie)).eval()  # fmt: skip
    before = {k: v.clone() for k, v in lm.state_dict().items()}
    q = quantize_lm(lm)
    assert not any(isinstance(m, nn.Linear) for m in q.modules())
    assert isinstance(q.output, Int8Linear) and q.output.out_features == 40  # a tied output layer too
    assert (lm.output is None) == tie and all(torch.equal(before[k], v) for k, v in lm.state_dict().items())
    tokens = torch.randint(0, 39, (3, 9))
    with torch.inference_mode():
        ref, got = torch.log_softmax(lm(tokens), -1), torch.log_softmax(q(tokens), -1)
        assert float((ref.exp() * (ref - got)).sum(-1).max()) < 0.01  # KL per position, nats
        with torch.autocast("cpu", dtype=torch.bfloat16):  # under autocast its products return autocast's dtype
            assert q.output(torch.randn(2, 32)).dtype == torch.bfloat16


def test_the_lm_directory_quantizes_once(tmp_path):
    from asr.lm import LanguageModel, LMExperimentConfig

    cfg = LMConfig(type="transformer", vocab_size=40, d_model=32, heads=4, ffn_dim=64, layers=1, dropout=0.0)
    lm = LanguageModel(build_lm(cfg).eval(), LMExperimentConfig(cfg), None, tmp_path)
    assert lm.network() is lm.model and lm.network(quantized=True) is lm.network(quantized=True)
    assert isinstance(lm.network(quantized=True).output, Int8Linear)
    lm.model.to("meta")  # any device but the CPU
    with pytest.raises(ValueError, match="int8 products are for decoding on a CPU"):
        lm.network(quantized=True)
