"""The model's speed paths, behind one door: each a drop-in for a plain PyTorch piece.

The model's layers construct these modules and call these functions as they would PyTorch's; what
makes them faster on a CPU lives here, each next to the reference it must equal (tested in
``tests/test_perf_equivalence.py``) and each switched by ``asr.speed`` where it was measured faster
(``tools/bench_paths.py``, docs/performance.md):

    drop-in                 reference                                  speed path (asr.speed)
    Linear, linear          nn.Linear, F.linear                        onednn_linear: fp32 products in oneDNN;
                                                                       onednn_inference: the same outside autograd
    Dropout, dropout        nn.Dropout, F.dropout                      cheap_dropout: 16-bit slices of random words
    attention               F.scaled_dot_product_attention             cheap_dropout (training on CPU)
    FeedForward             Linear, ReLU, Dropout, Linear              real_frames: in training on CPU, the real
                                                                       frames only; always: ReLU and dropout keep
                                                                       one tensor, ReLU inside the product
                                                                       outside autograd
    conv_stack              conv(x.unsqueeze(1)), the frontend's convs conv_channels_last; outside autograd
                                                                       conv_patch_gemm: in chunks;
                                                                       fp32 training: conv_patch_train
    flatten_channels        y.transpose(1, 2).flatten(2)               always: a channels-last gradient
"""

from asr.model.fast.attention_dropout import attention
from asr.model.fast.cheap_dropout import Dropout, dropout
from asr.model.fast.conv_channels_last import conv_stack, flatten_channels
from asr.model.fast.feedforward import FeedForward
from asr.model.fast.onednn_linear import Linear, linear

__all__ = ["Linear", "linear", "Dropout", "dropout", "attention", "FeedForward", "conv_stack", "flatten_channels"]
