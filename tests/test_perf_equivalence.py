"""Performance changes keep behaviour identical: the fused FFN equals Linear-ReLU-Dropout-Linear."""

import pytest
import torch
from torch import nn

from asr.model.transformer import FeedForward


def _reference(ffn: FeedForward) -> nn.Sequential:
    ref = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(ffn[2].p), nn.Linear(32, 8))
    ref.load_state_dict(ffn.state_dict())
    return ref


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_feedforward_is_bitwise_identical(train, dtype):
    torch.manual_seed(1)
    ffn = FeedForward(8, 32, dropout=0.3).train(train)
    ref = _reference(ffn).train(train)
    x = torch.randn(4, 50, 8)
    outs, grads = [], []
    for m in (ffn, ref):
        x1 = x.clone().requires_grad_(True)
        torch.manual_seed(7)  # the same dropout masks
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            y = m(x1)
        (y.float() * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append(y)
        grads.append([x1.grad] + [p.grad for p in m.parameters()])
    assert outs[0].dtype == outs[1].dtype
    assert torch.equal(outs[0], outs[1])
    for a, b in zip(grads[0], grads[1], strict=True):
        assert torch.equal(a, b)
    if train:  # dropout is really on: other random numbers give another output
        torch.manual_seed(8)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            assert not torch.equal(ffn(x), outs[0])


def test_fused_feedforward_state_dict_keys_unchanged():
    assert set(FeedForward(8, 32, 0.1).state_dict()) == {"0.weight", "0.bias", "3.weight", "3.bias"}


def test_fused_feedforward_no_grad_path_matches():
    torch.manual_seed(0)
    ffn = FeedForward(8, 32, dropout=0.2).train()
    x = torch.randn(3, 8)
    torch.manual_seed(5)
    a = ffn(x)
    torch.manual_seed(5)
    with torch.no_grad():
        b = ffn(x)
    assert torch.equal(a, b)


def test_conv2d_frontend_inplace_relu_matches_plain_relu():
    from asr.model.frontend import Conv2dFrontend

    torch.manual_seed(0)
    fe = Conv2dFrontend(20, 16)
    ref = Conv2dFrontend(20, 16)
    ref.load_state_dict(fe.state_dict())
    ref.conv[1], ref.conv[3] = nn.ReLU(), nn.ReLU()
    x = torch.randn(2, 30, 20)
    lens = torch.tensor([30, 21])
    ys = []
    for m in (fe, ref):
        y, out_lens = m(x, lens)
        y.square().sum().backward()
        ys.append((y, out_lens, [p.grad for p in m.parameters()]))
    assert torch.equal(ys[0][0], ys[1][0]) and torch.equal(ys[0][1], ys[1][1])
    for a, b in zip(ys[0][2], ys[1][2], strict=True):
        assert torch.equal(a, b)
