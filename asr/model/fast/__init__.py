"""The model's speed paths, behind one door: each a drop-in for a plain PyTorch piece.

A reader of ``frontend.py``, ``attention.py`` and ``transformer.py`` sees the plain model; what
runs faster on CPU lives here, each next to the reference it must equal (tested in
``tests/test_perf_equivalence.py``) and each on only where ``asr.speed`` says it was measured
faster (``tools/bench_paths.py``):

    drop-in                 reference                                  speed path (asr.speed)
    Linear, linear          nn.Linear, F.linear                        onednn_linear: fp32 products in oneDNN
                                                                       (onednn_inference, onednn_big_inference:
                                                                       outside autograd); the rest outside
                                                                       autograd: mkl_packed_inference, MKL
                                                                       with the weight packed once
                                                                       (mkl_packed.py)
    linear_relu             F.relu(F.linear) outside autograd          the same, with the ReLU in the product
    Dropout, dropout        nn.Dropout, F.dropout                      cheap_dropout: 16-bit slices of random words
    attention               F.scaled_dot_product_attention             cheap_dropout (training on CPU)
    relu_dropout            F.dropout(F.relu(h))                       always: one saved tensor instead of two
    conv_stack              conv(x.unsqueeze(1)), the frontend's convs conv_channels_last; outside autograd
                                                                       conv_patch_gemm: in chunks;
                                                                       fp32 training: conv_patch_train
                                                                       (with real_frames: real frames only)
    flatten_channels        y.transpose(1, 2).flatten(2)               always: a channels-last gradient
    on_real_frames          a row-wise block on every frame            real_frames: in training on CPU, the
                                                                       real frames only (real_frames.py)
"""

from asr.model.fast.attention_dropout import attention
from asr.model.fast.cheap_dropout import Dropout, dropout
from asr.model.fast.conv_channels_last import conv_stack, flatten_channels
from asr.model.fast.fused_relu_dropout import relu_dropout
from asr.model.fast.onednn_linear import Linear, linear, linear_relu
from asr.model.fast.real_frames import on_real_frames, real_rows

__all__ = [
    "Linear", "linear", "linear_relu", "Dropout", "dropout", "attention", "relu_dropout", "conv_stack",
    "flatten_channels", "on_real_frames", "real_rows",
]
