"""Performance changes keep behaviour identical: the fused FFN equals Linear-ReLU-Dropout-Linear,
the CPU dropout mask has the right statistics, the inference frontend equals the training one."""

import pytest
import torch
from torch import nn

from asr import speed
from asr.model.attention import MultiHeadAttention, lengths_to_keep_mask
from asr.model.fast import FeedForward
from asr.model.fast import onednn_linear as linear_mod
from asr.model.fast.cheap_dropout import Dropout, dropout, effective_p, keep_mask


@pytest.fixture(autouse=True)
def all_speed_paths_on():
    """Every speed path is tested on every CPU, also where asr.speed leaves it off by default."""
    with speed.override(**dict.fromkeys(speed.PATHS, True)):
        yield


def _reference(ffn: FeedForward) -> nn.Sequential:
    d, f = ffn[0].in_features, ffn[0].out_features
    ref = nn.Sequential(nn.Linear(d, f), nn.ReLU(), Dropout(ffn[2].p), nn.Linear(f, d))
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


def test_cpu_dropout_mask_statistics_and_gradient():
    torch.manual_seed(0)
    for p in (0.1, 0.3):
        keep = keep_mask((1000, 4000), p)
        assert keep.dtype == torch.bool and keep.shape == (1000, 4000)
        rate = 1 - keep.float().mean().item()
        assert abs(rate - p) < 5e-4, (p, rate)  # 4 M draws: the standard error is 2e-4
        assert abs(effective_p(p) - p) <= 2**-17
        # no structure between the four 16-bit quarters of one 64-bit draw
        quarters = keep.flatten()[: 4_000_000].view(-1, 4).float()
        corr = torch.corrcoef(quarters.T)
        assert (corr - torch.eye(4)).abs().max() < 5e-3
    x = torch.ones(200, 1000, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.25, True)
    y.sum().backward()
    scale = 1 / (1 - effective_p(0.25))
    values = torch.unique(y).tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(scale)
    assert torch.equal(x.grad, y.detach())  # d(sum)/dx = mask * scale = y for x = 1
    assert abs(y.mean().item() - 1) < 0.01  # the expectation is kept
    torch.manual_seed(3)
    assert torch.equal(dropout(torch.ones(200, 1000), 0.25, True), y)  # the global generator decides
    assert dropout(x, 0.25, False) is x and dropout(x, 0.0, True) is x


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.bfloat16])
def test_cpu_dropout_mask_is_the_one_of_earlier_releases(dtype):
    """The same seed gives the same masks as before (16-bit quarters of ``torch.randint`` words over
    the whole int64 range), so training runs stay reproducible across releases; in any dtype."""
    n, p = 10_001, 0.1
    torch.manual_seed(11)
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
    ref = words.view(torch.int16)[:n] >= -(2**15) + round(p * 2**16)
    torch.manual_seed(11)
    mask = keep_mask((n,), p, dtype)
    assert mask.dtype == dtype and torch.equal(mask.bool(), ref)
    assert set(mask.float().unique().tolist()) == {0.0, 1.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_dropout_equals_the_masked_reference_in_each_dtype(dtype):
    """x * mask * scale in one ``addcmul`` (the mask in x's dtype): the same values as
    where(mask, x, 0) * scale (a dropped negative is -0.0, equal to 0.0) and the same gradient."""
    torch.manual_seed(0)
    x = torch.randn(64, 300).to(dtype).requires_grad_(True)
    torch.manual_seed(4)
    y = dropout(x, 0.1, True)
    torch.manual_seed(4)
    keep = keep_mask(x.shape, 0.1)
    ref = torch.where(keep, x.detach(), 0) * (1 / (1 - effective_p(0.1)))
    assert y.dtype == dtype and torch.equal(y.detach(), ref)
    g = torch.randn(64, 300).to(dtype)
    y.backward(g)
    assert torch.equal(x.grad, torch.where(keep, g, 0) * (1 / (1 - effective_p(0.1))))


@pytest.mark.parametrize("pre_norm", [True, False])
def test_encoder_ffn_on_real_frames_only_equals_every_frame(pre_norm):
    """``real_frames``: in training the encoder's FFN skips padding. Real frames' outputs and
    every gradient equal the FFN on every frame (padding reaches no real frame: the attention masks
    it); without padding, or outside autograd, nothing is skipped."""
    from asr.model.transformer import Encoder

    torch.manual_seed(0)
    enc = Encoder(32, 4, 64, 2, 0.0, pre_norm).train()
    x = torch.randn(3, 11, 32)
    lens = torch.tensor([11, 7, 4])
    real = lengths_to_keep_mask(lens, 11)  # (B, T)
    results = []
    for on in (True, False):
        enc.zero_grad()
        xi = x.clone().requires_grad_(True)
        with speed.override(real_frames=on):
            y = enc(xi, lens)
        (y * real.unsqueeze(-1) * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results.append((y[real], xi.grad, [p.grad for p in enc.parameters()]))
    (y, gx, grads), (y_ref, gx_ref, grads_ref) = results
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gx, gx_ref, atol=1e-5, rtol=1e-5)
    assert not gx[~real].any()  # padding gets no gradient, either way
    for g, g_ref in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-4)
    layer = enc.layers[0]
    calls = []
    layer.ffn[3].register_forward_hook(lambda m, i, o: calls.append(i[0].shape[:-1].numel()))
    for grad, lengths in ((True, lens), (True, torch.full((3,), 11)), (False, lens)):
        with torch.set_grad_enabled(grad), speed.override(real_frames=True):
            enc(x, lengths)
    assert calls == [22, 33, 33]  # rows the FFN saw: real frames only in training with padding


def test_flatten_channels_sends_a_channels_last_gradient():
    from asr.model.fast import flatten_channels

    y = torch.randn(2, 5, 7, 3).contiguous(memory_format=torch.channels_last).requires_grad_(True)
    out = flatten_channels(y)
    assert torch.equal(out, y.detach().transpose(1, 2).flatten(2))
    g = torch.randn_like(out)
    out.backward(g)
    assert y.grad.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y.grad, g.view(2, 7, 5, 3).transpose(1, 2))


def test_attention_dropout_path_matches_sdpa_when_nothing_is_dropped():
    """The CPU training path (explicit softmax, cheaper mask) computes SDPA's attention."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, dropout=1e-9)  # rounds to p = 0: every weight kept
    x = torch.randn(3, 17, 32)
    keep = lengths_to_keep_mask(torch.tensor([17, 9, 4]), 17)[:, None, None, :]
    attn.train()
    y_train = attn(x, keep)
    attn.eval()
    y_eval = attn(x, keep)
    torch.testing.assert_close(y_train, y_eval, atol=1e-6, rtol=1e-5)
    attn.dropout = 0.5
    attn.train()
    assert not torch.allclose(attn(x, keep), y_eval, atol=1e-3)


def _nchw_reference(fe, x: torch.Tensor) -> torch.Tensor:
    """What Conv2dFrontend computes off CPU: nn.Conv2d in NCHW, plain ReLU, then its projection."""
    c1, _, c2, _ = fe.conv
    y = nn.functional.relu(c2(nn.functional.relu(c1(x.unsqueeze(1)))))  # (B, C, T', F')
    y = y.transpose(1, 2).flatten(2)  # (B, T', C * F')
    s = fe.stack  # the stacked frames' vectors side by side
    return fe.proj(y[:, : y.shape[1] // s * s].reshape(y.shape[0], -1, s * y.shape[2]))


@pytest.mark.parametrize("mode", ["fp32", "fp32-chunks", "bf16", "inference"])
@pytest.mark.parametrize("frames", [200, 37, "min"])
@pytest.mark.parametrize("channels,stack", [(0, 1), (24, 1), (24, 2)])
def test_conv2d_frontend_cpu_paths_match_nchw_reference(mode, frames, channels, stack):
    """On CPU the frontend computes the same function another way (patch GEMM, channels-last, and in
    fp32 training a hand-written backward, "-chunks": its second convolution and weight gradient as
    products over patches in chunks, ``conv_patch_train``): outputs and gradients equal the NCHW
    reference's, to float32 rounding (bf16 rounding under autocast), with as many convolution
    channels as d_model (0) or fewer, and with two convolution frames stacked (8x subsampling)."""
    from asr.model.frontend import Conv2dFrontend

    torch.manual_seed(0)
    fe = Conv2dFrontend(80, 64, channels, stack)
    assert fe.conv[2].weight.shape == (channels or 64, channels or 64, 3, 3)
    shortest = fe.min_input_frames  # 7, or 11 with two frames stacked
    frames = shortest if frames == "min" else frames
    x = torch.randn(3, frames, 80)
    lens = torch.tensor([frames, max(shortest, frames - 5), shortest])
    real = lengths_to_keep_mask(fe.output_lengths(lens), (((frames - 1) // 2 - 1) // 2) // stack)  # (B, T')
    results = []
    for fn in (lambda: fe(x, lens)[0], lambda: _nchw_reference(fe, x)):
        fe.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
            with torch.inference_mode(mode == "inference"), speed.override(conv_patch_train=mode == "fp32-chunks"):
                y = fn()
        if mode != "inference":  # as in the model, nothing reads a frame past an utterance's length
            (y.float() * real.unsqueeze(-1) * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results.append((y.float().detach(), [p.grad for p in fe.parameters()]))
    (y, grads), (y_ref, grads_ref) = results
    assert y.shape == (3, (((frames - 1) // 2 - 1) // 2) // stack, 64)
    if mode == "fp32-chunks":  # those frames were left out (real_frames): only real frames compare
        left_out = y[~real]  # the Linear of a convolution output of zeros: its bias
        assert torch.equal(left_out, fe.proj.bias.detach().expand_as(left_out))
        y, y_ref = y[real], y_ref[real]
    tol = 0.02 if mode == "bf16" else 1e-5
    torch.testing.assert_close(y, y_ref, atol=tol, rtol=tol)
    grad_tol = 0.02 if mode == "bf16" else 1e-4  # fp32: a ReLU input that rounds to the other side of 0
    for g, g_ref in zip(grads, grads_ref, strict=True):
        if mode == "inference":
            assert g is None and g_ref is None
        else:
            assert (g - g_ref).abs().max() <= grad_tol * g_ref.abs().max()


onednn = pytest.mark.skipif(not linear_mod.onednn_available(), reason="this torch build has no oneDNN matmul")


@onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_onednn_linear_matches_f_linear_values_and_gradients(bias, layout):
    torch.manual_seed(0)
    w = torch.randn(96, 128, requires_grad=True)
    b = torch.randn(96, requires_grad=True) if bias else None
    x = torch.randn(4, 60, 128) if layout == "contiguous" else torch.randn(60, 4, 128).transpose(0, 1)
    assert linear_mod._use_onednn(x, w)  # the shapes really take the oneDNN path
    g = torch.randn(4, 60, 96)
    results = []
    for fn in (linear_mod.linear, nn.functional.linear):
        xi = x.clone().requires_grad_(True)
        for p in (w, b):
            if p is not None:
                p.grad = None
        y = fn(xi, w, b)
        y.backward(g)
        results.append([y, xi.grad, w.grad] + ([b.grad] if bias else []))
    for ours, ref in zip(*results, strict=True):
        assert ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)


@onednn
def test_onednn_linear_falls_back_where_it_should():
    w = torch.randn(256, 256)
    big, small = torch.randn(64, 256), torch.randn(2, 256)
    assert linear_mod._use_onednn(big, w)
    assert not linear_mod._use_onednn(small, w)  # per-call overhead would outweigh the faster kernel
    assert not linear_mod._use_onednn(big.double(), w.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not linear_mod._use_onednn(big, w)  # autocast: PyTorch's own bf16 path (oneDNN already)
        assert linear_mod.linear(big, w).dtype == torch.bfloat16
    with speed.override(onednn_linear=False, onednn_inference=False):  # off by asr.speed (or ASR_ONEDNN_LINEAR=0)
        assert not linear_mod._use_onednn(big, w)


@onednn
def test_training_and_inference_products_follow_their_own_paths():
    """onednn_linear decides the products autograd records, onednn_inference the others."""
    big, w = torch.randn(64, 256), torch.randn(256, 256, requires_grad=True)
    for train_on, infer_on in ((False, True), (True, False)):
        with speed.override(onednn_linear=train_on, onednn_inference=infer_on):
            assert linear_mod._use_onednn(big, w) == train_on  # recorded: training's path
            with torch.no_grad():
                assert linear_mod._use_onednn(big, w) == infer_on
            assert linear_mod._use_onednn(big, w.detach()) == infer_on
            assert linear_mod._use_onednn(big, w.detach(), "onednn_linear") == train_on  # onednn_mm's backward


@onednn
@pytest.mark.parametrize("paths", [{"onednn_inference": True}, {"onednn_inference": False}])
def test_feedforward_inference_with_the_relu_in_the_product_equals_the_reference(paths):
    """In inference the FFN's first product carries its ReLU (``linear_relu``): the plain modules' values
    to float32 rounding, in oneDNN and in MKL; with autograd recording, the training path."""
    torch.manual_seed(0)
    ffn = FeedForward(256, 2048, dropout=0.1).eval()
    ref = _reference(ffn).eval()
    x = torch.randn(4, 300, 256)
    with speed.override(**paths), torch.no_grad():
        torch.testing.assert_close(ffn(x), ref(x), rtol=1e-5, atol=1e-5)
        assert linear_mod._use_onednn(x, ffn[0].weight) == paths["onednn_inference"]
    w = ffn[0].weight
    ref_relu = torch.relu(x @ w.t() + ffn[0].bias)
    torch.testing.assert_close(linear_mod.linear_relu(x, w, ffn[0].bias), ref_relu, rtol=1e-5, atol=1e-5)
    assert linear_mod.linear_relu(x, w, ffn[0].bias).requires_grad  # recorded: F.relu(linear(...)), differentiable


@onednn
def test_onednn_linear_no_grad_and_tied_weight_gradients():
    torch.manual_seed(0)
    emb = nn.Embedding(600, 64)
    lin = linear_mod.Linear(64, 64)
    ids = torch.randint(0, 600, (8, 70))
    h = lin(emb(ids))  # the weight is used twice: as the embedding and as the tied output projection
    with torch.no_grad():
        torch.testing.assert_close(linear_mod.linear(h, emb.weight), nn.functional.linear(h, emb.weight))
    linear_mod.linear(h, emb.weight).logsumexp(-1).sum().backward()
    ours = [p.grad.clone() for p in (emb.weight, lin.weight, lin.bias)]
    for p in (emb.weight, lin.weight, lin.bias):
        p.grad = None
    h = nn.functional.linear(emb(ids), lin.weight, lin.bias)
    nn.functional.linear(h, emb.weight).logsumexp(-1).sum().backward()
    for a, p in zip(ours, (emb.weight, lin.weight, lin.bias), strict=True):
        torch.testing.assert_close(a, p.grad, rtol=1e-5, atol=1e-4)
    assert set(lin.state_dict()) == {"weight", "bias"}


@onednn
def test_inference_products_pack_the_weight_once_and_notice_every_change():
    """Outside autograd the weight is packed once; an optimizer step, load_state_dict or any
    in-place write makes a new packed copy, so no product ever uses a stale weight."""
    torch.manual_seed(0)
    lin = linear_mod.Linear(256, 2048)
    x = torch.randn(10, 1, 256)
    with speed.override(onednn_inference=True), torch.no_grad():
        assert linear_mod._use_onednn(x, lin.weight)
        packed = linear_mod.packed_weight(lin.weight)
        assert linear_mod.packed_weight(lin.weight) is packed  # kept while unchanged
        torch.testing.assert_close(lin(x), nn.functional.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    opt = torch.optim.AdamW(lin.parameters(), lr=0.1)
    lin(x).square().sum().backward()  # recorded: training's path, the plain weight
    opt.step()
    other = linear_mod.Linear(256, 2048)
    for change in (lambda: None, lambda: lin.load_state_dict(other.state_dict()),
                   lambda: lin.weight.mul_(0.5)):
        with torch.no_grad():
            change()
            torch.testing.assert_close(lin(x), nn.functional.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(linear_mod.linear(x, lin.weight), x @ lin.weight.t(), rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        made_there = torch.randn(2048, 256) / 16  # a Linear's scale, as the products above (atol 1e-5 fits it)
        assert linear_mod.packed_weight(made_there) is made_there  # no version counter: the plain weight
        torch.testing.assert_close(linear_mod.linear(x, made_there), x @ made_there.t(), rtol=1e-5, atol=1e-5)


@onednn
@pytest.mark.parametrize("shape", [(256, 2048), (2048, 256), (256, 768), (512, 500)])
def test_packed_product_rows_do_not_depend_on_the_batch(shape):
    """A decoder step's row is the same alone (one utterance's beam) and in a batch of 160."""
    k, n = shape
    torch.manual_seed(0)
    w, b, x = torch.randn(n, k), torch.randn(n), torch.randn(160, k)
    with speed.override(onednn_inference=True), torch.no_grad():
        full = linear_mod.linear(x, w, b)
        for rows in (10, 20, 80):
            assert torch.equal(linear_mod.linear(x[:rows], w, b), full[:rows])


@onednn
def test_conv_patch_gemm_follows_weight_changes_and_inference_made_weights(monkeypatch):
    """Decoding's convolutions in chunks, as products over patches (``conv_patch_gemm``), equal
    oneDNN's convolution under no_grad, after an in-place change of the second kernel (its packed
    matrix is remade), and for a frontend made under inference_mode (that kernel packed per call)."""
    from asr.model.fast import conv_channels_last as conv_mod
    from asr.model.frontend import Conv2dFrontend

    calls = []
    in_chunks = conv_mod._conv_stack_in_chunks
    monkeypatch.setattr(conv_mod, "_conv_stack_in_chunks", lambda *a: calls.append(1) or in_chunks(*a))
    torch.manual_seed(0)
    x, lens = torch.randn(2, 300, 80), torch.tensor([300, 250])
    with speed.override(conv_patch_gemm=True), torch.no_grad():
        Conv2dFrontend(80, 48)(x, lens)
    assert not calls  # 48 channels and 2 x 3 s: too narrow and too small for the chunks
    monkeypatch.setattr(conv_mod, "CHUNK_MIN_CHANNELS", 0)
    monkeypatch.setattr(conv_mod, "CHUNK_MIN_ELEMENTS", 0)

    def both(fe):
        out = []
        for on in (True, False):
            with speed.override(conv_patch_gemm=on), torch.no_grad():
                out.append(fe(x, lens)[0])
        return out

    fe = Conv2dFrontend(80, 48)
    y, y_ref = both(fe)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        fe.conv[2].weight.mul_(-0.5)
    y2, y2_ref = both(fe)
    torch.testing.assert_close(y2, y2_ref, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(y2, y, atol=1e-3)
    with torch.inference_mode():
        fe_inf = Conv2dFrontend(80, 48)
        fe_inf.load_state_dict(fe.state_dict())
        assert fe_inf.conv[2].weight.is_inference()
        for on in (True, False):
            with speed.override(conv_patch_gemm=on):
                torch.testing.assert_close(fe_inf(x, lens)[0], y2_ref, atol=1e-5, rtol=1e-5)
    assert len(calls) == 3  # the path ran in each "on" case


def test_conv_chunks_only_for_wide_big_convolutions():
    """The chunks run where they were measured faster: 128+ channels and a first output of 32 MB+."""
    from asr.model.fast.conv_channels_last import _big

    wide, narrow = nn.Conv2d(1, 256, 3, 2), nn.Conv2d(1, 64, 3, 2)
    ten_seconds = torch.empty(8, 1000, 80)  # first output 8 x 499 x 39 x 256 = 40 M elements
    assert _big(ten_seconds, wide)
    assert not _big(ten_seconds[:1], wide)  # one utterance: 5 M, in cache
    assert not _big(ten_seconds, narrow)  # FSDD's width
