"""The Conv2d frontend's two convolutions, channels-last on CPU (reference: ``conv(x.unsqueeze(1))``).

The first convolution (one input channel, a 9-wide reduction that oneDNN runs memory-bound) is one
GEMM over 3x3 patches that writes channels-last (in fp32 oneDNN's, with the bias and ReLU fused
into its one pass over the output); the second runs channels-last with channels-last weights,
oneDNN's fast layout. In plain fp32 training the backward is written out
(:class:`_ConvStackChannelsLast`): oneDNN's own fp32 channels-last weight gradient is slow, so that
gradient is one matrix product over the 3x3 input patches. The output is the NCHW tensor
``relu(conv2(relu(conv1(x))))`` (in channels-last memory); values and gradients equal the
reference to float32 rounding
(``tests/test_perf_equivalence.py::test_conv2d_frontend_cpu_paths_match_nchw_reference``).

Outside autograd (decoding), where the speed path ``conv_patch_gemm`` is on, both convolutions run
in chunks of about :data:`PATCH_ROWS` output positions (:func:`_conv_stack_in_chunks`): the first
convolution's rows that a chunk needs, then the second as one oneDNN product over their 3x3
patches with its kernel packed once. The first convolution's whole output (320 MB for 16 x 10 s)
is never written and read back. Only for wide convolutions with a big first output
(:data:`CHUNK_MIN_CHANNELS`, :data:`CHUNK_MIN_ELEMENTS`): convolutions that fit in cache (one
utterance of 10 s, FSDD's 64 channels) are faster whole, so the thresholds keep those on oneDNN's
convolution. Values equal the reference's to float32 rounding (tested with the rest of the frontend).

In fp32 training, where the speed path ``conv_patch_train`` is on, the second convolution runs the
same way over the first one's output (which backward needs whole anyway:
:func:`_conv2_in_chunks`), and its weight gradient sums chunk by chunk
(:func:`_conv2_weight_grad_in_chunks`) instead of one product over all 3x3 windows at once (350 MB
for 8 x 10 s written and read back): where oneDNN's channels-last convolution has no AVX-512
kernels, plain products over patches are faster. With the speed path ``real_frames`` the chunks
stop at each utterance's last real output frame (the ``real`` counts from the frontend) and the
frames after it are left 0: nothing reads them, their gradient is 0 (``real_frames.py``).
docs/performance.md has the measurements.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asr import speed
from asr.model.fast.onednn_linear import _mm, _recorded, onednn_available, onednn_mm, packed_weight

__all__ = ["conv_stack", "flatten_channels"]

PATCH_ROWS = 480  # output positions per chunk of _conv_stack_in_chunks (24-32 frames of 19 bins measured alike)
CHUNK_MIN_CHANNELS = 128  # chunks only for convolutions this wide (with 64 channels they were slower throughout)
CHUNK_MIN_ELEMENTS = 1 << 23  # and a first output at least this big (32 MB in fp32: more than an L3 holds)


def conv_stack(x: torch.Tensor, conv: nn.Sequential, real: torch.Tensor | None = None) -> torch.Tensor:
    """``conv(x.unsqueeze(1))`` for the frontend's (Conv2d, ReLU, Conv2d, ReLU): (B, T, F) -> (B, C, T', F'),
    channels-last on CPU where the speed path ``conv_channels_last`` is on. ``real`` (B,): the output
    frames of each utterance that the model reads; in fp32 training with ``conv_patch_train`` and
    ``real_frames`` the second convolution then skips the others and leaves them 0."""
    if x.device.type != "cpu" or not speed.enabled("conv_channels_last"):
        return conv(x.unsqueeze(1))
    c1, c2 = conv[0], conv[2]
    params = (c1.weight, c1.bias, c2.weight, c2.bias)
    if torch.is_grad_enabled() and x.dtype == torch.float32 and not x.requires_grad:  # training on features
        if not torch.is_autocast_enabled("cpu"):
            frames = real.tolist() if real is not None and speed.enabled("real_frames") else None
            return _ConvStackChannelsLast.apply(x, *params, frames)
        if torch.get_autocast_dtype("cpu") == torch.bfloat16:  # as autocast would: bf16 copies, fp32 gradients
            with torch.autocast("cpu", enabled=False):
                return _ConvStackChannelsLast.apply(*(t.to(torch.bfloat16) for t in (x, *params)), None)
    if speed.enabled("conv_patch_gemm") and not _recorded(x, *params) and _fused_ok(x, c2.weight) and _big(x, c1):
        return _conv_stack_in_chunks(x, *params)
    return _conv_stack(x, *params)[2]


def _big(x: torch.Tensor, c1: nn.Conv2d) -> bool:
    """Whether the first convolution's output is wide and big enough for :func:`_conv_stack_in_chunks`."""
    b, t, f = x.shape
    c = c1.out_channels
    return c >= CHUNK_MIN_CHANNELS and b * ((t - 1) // 2) * ((f - 1) // 2) * c >= CHUNK_MIN_ELEMENTS


def flatten_channels(y: torch.Tensor) -> torch.Tensor:
    """``y.transpose(1, 2).flatten(2)``: (B, C, T, F) -> (B, T, C * F), columns (c, f). For a channels-last
    CPU tensor that needs a gradient, the gradient goes back channels-last, the layout of the ReLU
    output it meets next, whose backward is then one vectorised pass instead of a strided one (bf16,
    8 x 1000 frames: 23 ms -> a few, for a copy of about 3 ms)."""
    channels_last = y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    if y.requires_grad and y.device.type == "cpu" and channels_last:
        return _FlattenChannelsLast.apply(y)
    return y.transpose(1, 2).flatten(2)


class _FlattenChannelsLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        ctx.shape = y.shape
        return y.transpose(1, 2).flatten(2)

    @staticmethod
    def backward(ctx, g):
        b, c, t, f = ctx.shape
        return g.reshape(b, t, c, f).transpose(1, 2).contiguous(memory_format=torch.channels_last)


def _patches3x3(x: torch.Tensor) -> torch.Tensor:
    """(B, T, F) -> (B, T1, F1, 9): the 3x3 stride-2 windows of the first convolution (a view)."""
    p = x.unfold(1, 3, 2).unfold(2, 3, 2)  # (B, T1, F1, 3, 3)
    return p.reshape(*p.shape[:3], 9)


def _fused_ok(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """fp32 on a CPU outside autocast, where oneDNN's Linear with a fused ReLU exists."""
    fp32 = x.dtype == weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
    return fp32 and onednn_available() and torch.backends.mkldnn.enabled


def _conv1_patch_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """relu(conv1(x)) as one GEMM over 3x3 patches, (B, C, T1, F1) in channels-last memory."""
    p = _patches3x3(x)
    b, t1, f1, _ = p.shape
    if _fused_ok(x, weight) and not _recorded(x, weight, bias):  # bias and ReLU in oneDNN's one pass over the output
        h = _mm(p.reshape(-1, 9), weight.view(weight.shape[0], 9), bias, "relu")
    else:
        w_t = weight.view(weight.shape[0], 9).t().contiguous()  # contiguous: its gradient is then p^T g, not (g^T p)^T
        h = torch.addmm(bias, p.reshape(-1, 9), w_t).relu_()  # (B * T1 * F1, C)
    return h.view(b, t1, f1, -1).permute(0, 3, 1, 2)


def _patches_of(h_cl: torch.Tensor, t2: int, f2: int) -> torch.Tensor:
    """(B, T1, F1, C) -> (B, T2, F2, 3, 3, C): the second convolution's 3x3 stride-2 input windows (a view)."""
    sb, st, sf, sc = h_cl.stride()
    shape = (h_cl.shape[0], t2, f2, 3, 3, h_cl.shape[3])
    return h_cl.as_strided(shape, (sb, 2 * st, 2 * sf, st, sf, sc), h_cl.storage_offset())


def _patch_matrix(w: torch.Tensor) -> torch.Tensor:
    """A kernel (C_out, C_in, 3, 3) as the matrix of the products over its patches, (C_out, 3 * 3 * C_in)."""
    return w.permute(0, 2, 3, 1).reshape(w.shape[0], -1)


def _conv_stack_in_chunks(x, w1, b1, w2, b2) -> torch.Tensor:
    """relu(conv2(relu(conv1(x)))) outside autograd, about PATCH_ROWS output positions at a time: the
    conv1 output rows a chunk needs (one product over their 3x3 windows of x), then its conv2 (one
    product over the 3x3 windows of those rows, copied once into a small buffer). The whole conv1
    output (320 MB for 16 x 10 s of the 100 h model) is never made. Returns (B, C, T2, F2), a view
    of (B, T2, C, F2) memory, so that :func:`flatten_channels` is a view."""
    b, t, f0 = x.shape
    t1, f1 = (t - 3) // 2 + 1, (f0 - 3) // 2 + 1
    t2, f2 = (t1 - 3) // 2 + 1, (f1 - 3) // 2 + 1
    if t2 < 1 or f2 < 1:  # too short for the convolutions: the reference's own error
        return _conv_stack(x, w1, b1, w2, b2)[2]
    c1, c2 = w1.shape[0], w2.shape[0]
    w1m, w2m = w1.view(c1, 9), packed_weight(w2, _patch_matrix)
    out = x.new_empty(b, t2, c2, f2)
    frames = max(1, PATCH_ROWS // f2)  # output frames per chunk
    buf = x.new_empty(min(frames, t2), f2, 3, 3, c1)
    for i in range(b):
        for s in range(0, t2, frames):
            n = min(frames, t2 - s)
            h = _mm(_patches3x3(x[i : i + 1, 4 * s : 4 * s + 4 * n + 3]).reshape(-1, 9), w1m, b1, "relu")
            p = buf[:n]
            p.copy_(_patches_of(h.view(1, 2 * n + 1, f1, c1), n, f2)[0])  # conv1 rows 2s .. 2s + 2n
            out[i, s : s + n] = _mm(p.view(-1, 9 * c1), w2m, b2, "relu").view(n, f2, c2).transpose(1, 2)
    return out.transpose(1, 2)


def _window_chunks(h_cl: torch.Tensor, t2: int, f2: int, real: list[int] | None = None):
    """The second convolution's 3x3 input windows of h (B, T1, F1, C) memory, about PATCH_ROWS output
    positions at a time: yields (utterance, first output frame, the windows as (positions, 9 * C)),
    each chunk copied once into one small buffer that the next chunk reuses; with ``real``, only
    the first ``real[i]`` output frames of utterance i."""
    frames = max(1, PATCH_ROWS // f2)
    buf = h_cl.new_empty(min(frames, t2), f2, 3, 3, h_cl.shape[3])
    for i in range(h_cl.shape[0]):
        windows = _patches_of(h_cl[i : i + 1], t2, f2)[0]  # (T2, F2, 3, 3, C), a view
        last = t2 if real is None else max(0, min(t2, real[i]))
        for s in range(0, last, frames):
            n = min(frames, last - s)
            p = buf[:n]
            p.copy_(windows[s : s + n])
            yield i, s, p.view(n * f2, -1)


def _conv2_in_chunks(h_cl: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor, real: list[int] | None = None):
    """relu(conv2(h)) for h as (B, T1, F1, C) memory, one product per chunk of :func:`_window_chunks`
    with the bias and ReLU fused where oneDNN can. Returns (B, C, T2, F2) in channels-last memory,
    as ``F.conv2d`` does; with ``real``, 0 after the first ``real[i]`` frames of utterance i."""
    b, t1, f1, _ = h_cl.shape
    t2, f2, c2 = (t1 - 3) // 2 + 1, (f1 - 3) // 2 + 1, w2.shape[0]
    fused = _fused_ok(h_cl, w2)
    wm = packed_weight(w2, _patch_matrix) if fused else _patch_matrix(w2).t()
    out = h_cl.new_empty(b, t2, f2, c2)
    for i, n in enumerate(real or ()):
        out[i, max(0, n) :] = 0
    for i, s, p in _window_chunks(h_cl, t2, f2, real):
        rows = out[i, s : s + p.shape[0] // f2].view(-1, c2)
        if fused:
            rows.copy_(_mm(p, wm, b2, "relu"))
        else:
            torch.addmm(b2, p, wm, out=rows).relu_()
    return out.permute(0, 3, 1, 2)


def _conv2_weight_grad_in_chunks(h_cl: torch.Tensor, gz_cl: torch.Tensor, real: list[int] | None = None):
    """The second convolution's weight gradient as a (C_out, 3 * 3 * C_in) matrix: the sum over the
    output positions of gz times their 3x3 input windows, chunk by chunk of :func:`_window_chunks`,
    instead of all windows at once (350 MB for 8 x 10 s). h_cl (B, T1, F1, C_in), gz_cl (B, T2, F2,
    C_out). Summed as its transpose, windows^T gz (9 C_in x C_out), whose tall-and-thin product MKL
    runs faster than gz^T windows (the same sums). Returned as a view of that sum, (C_out, 9 C_in)."""
    _, t2, f2, c2 = gz_cl.shape
    gw_t = gz_cl.new_zeros(9 * h_cl.shape[3], c2)
    for i, s, p in _window_chunks(h_cl, t2, f2, real):  # gz is 0 on the frames left out
        gw_t.addmm_(p.t(), gz_cl[i, s : s + p.shape[0] // f2].reshape(-1, c2))
    return gw_t.t()


def _conv_stack(x, w1, b1, w2, b2, chunks: bool = False, real: list[int] | None = None):
    """relu(conv2(relu(conv1(x)))) channels-last: (conv1 output h, w2 in channels-last, output y);
    ``chunks``: the second convolution as products over its windows (:func:`_conv2_in_chunks`), then
    only on the ``real`` frames of each utterance where given."""
    h = _conv1_patch_gemm(x, w1, b1)  # (B, C, T1, F1) channels-last
    w2_cl = w2.contiguous(memory_format=torch.channels_last)
    y = _conv2_in_chunks(h.permute(0, 2, 3, 1), w2, b2, real) if chunks else F.conv2d(h, w2_cl, b2, 2).relu_()
    return h, w2_cl, y


class _ConvStackChannelsLast(torch.autograd.Function):
    """relu(conv2(relu(conv1(x)))) for CPU training, channels-last throughout, backward written out.
    In fp32 the second convolution's input gradient comes from oneDNN (channels-last, fast) but its
    weight gradient is one oneDNN matrix product over its 3x3 input patches (oneDNN's channels-last
    fp32 weight gradient took 0.50 s here, the patch product 0.2 s with the copy; 8 x 1000 frames,
    d 256, 2 threads: frontend forward + backward 0.96 -> 0.7 s); in bf16 oneDNN gives all three.
    Either way the first ReLU's gradient is taken in place, in the buffer oneDNN just wrote (the
    largest tensor of the step: no second one, no fresh pages to fault in). The input needs no
    gradient (fbank features)."""

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, real=None):
        ctx.chunks = x.dtype == torch.float32 and speed.enabled("conv_patch_train")
        ctx.real = real if ctx.chunks else None  # frames after these are 0, and so is their gradient
        h, w2, y = _conv_stack(x, w1, b1, w2, b2, ctx.chunks, ctx.real)
        ctx.save_for_backward(x, h, w2, y)
        return y

    @staticmethod
    def backward(ctx, gy):
        x, h, w2, y = ctx.saved_tensors
        gy = gy.contiguous(memory_format=torch.channels_last)  # already so from flatten_channels
        gz = torch.ops.aten.threshold_backward(gy, y, 0)  # (B, C, T2, F2) channels-last: gy where y > 0
        c = gz.shape[1]
        h_cl = h.permute(0, 2, 3, 1)  # (B, T1, F1, C) contiguous
        if gz.dtype == torch.float32:
            gz_rows = gz.permute(0, 2, 3, 1).reshape(-1, c)  # (B * T2 * F2, C), a view
            if ctx.chunks:
                gw2 = _conv2_weight_grad_in_chunks(h_cl, gz.permute(0, 2, 3, 1), ctx.real)
            else:
                patches = _patches_of(h_cl, *gz.shape[2:]).reshape(-1, 9 * c)
                gw2 = onednn_mm(gz_rows.t(), patches.t())
                del patches
            gw2 = gw2.unflatten(1, (3, 3, c)).permute(0, 3, 1, 2)  # (C_out, C_in, 3, 3), a view
            gb2 = gz_rows.sum(0)
            gh = torch.ops.aten.convolution_backward(
                gz, h, w2, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1, [True, False, False]
            )[0]  # (B, C, T1, F1) channels-last
        else:
            gh, gw2, gb2 = torch.ops.aten.convolution_backward(
                gz, h, w2, [c], [2, 2], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True]
            )
        gh_rows = gh.permute(0, 2, 3, 1)  # (B, T1, F1, C) contiguous
        torch.ops.aten.threshold_backward.grad_input(gh_rows, h_cl, 0, grad_input=gh_rows)  # ReLU: 0 where h is 0
        gh_rows = gh_rows.view(-1, c)
        gw1 = (_patches3x3(x).reshape(-1, 9).t() @ gh_rows).t().reshape(c, 1, 3, 3)
        return None, gw1, gh_rows.sum(0), gw2.contiguous(), gb2, None
