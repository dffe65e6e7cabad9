"""ESPnet and SpeechBrain models at our 100 h size, for tools/bench.py (runs in tools/peers/.venv).

Both are built from the toolkits' own classes the way their LibriSpeech recipes build them, at
the size of configs/librispeech/transformer_100h.yaml with the Conv2d frontend: d_model 256,
4 heads, 12 encoder / 6 decoder layers, FFN 2048, Conv2d 4x subsampling, vocabulary 500, CTC
weight 0.3, label smoothing 0.1, pre-norm, ReLU, dropout 0.1 (also on attention weights, as in
ours). Weights are random. Inputs are
fbank features (no frontend, SpecAugment or normalisation module), as ours receive them after
the data loader. Nothing in ``asr`` imports this file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

D_MODEL, HEADS, FFN, ENC_LAYERS, DEC_LAYERS, VOCAB, CTC_WEIGHT, LSM = 256, 4, 2048, 12, 6, 500, 0.3, 0.1


@dataclass
class Batch:
    feats: torch.Tensor  # (B, T, 80)
    feat_lens: torch.Tensor  # (B,)
    tokens: torch.Tensor  # (B, U), 0-padded, ids in [2, V - 2]
    token_lens: torch.Tensor  # (B,)


def build_espnet(vocab: int = VOCAB) -> torch.nn.Module:
    """ESPnet2's ESPnetASRModel with TransformerEncoder (conv2d input layer) and TransformerDecoder."""
    logging.getLogger().setLevel(logging.ERROR)  # ESPnet logs a flash-attn warning at import
    from espnet2.asr.ctc import CTC
    from espnet2.asr.decoder.transformer_decoder import TransformerDecoder
    from espnet2.asr.encoder.transformer_encoder import TransformerEncoder
    from espnet2.asr.espnet_model import ESPnetASRModel

    # use_flash_attn=False: without the flash_attn package ESPnet falls back to this same default
    # attention (matmul + softmax) after a failed try on the first call.
    encoder = TransformerEncoder(
        80, D_MODEL, HEADS, FFN, ENC_LAYERS, dropout_rate=0.1, positional_dropout_rate=0.1,
        attention_dropout_rate=0.1, input_layer="conv2d", normalize_before=True, use_flash_attn=False,
    )
    decoder = TransformerDecoder(
        vocab, D_MODEL, HEADS, FFN, DEC_LAYERS, dropout_rate=0.1, positional_dropout_rate=0.1,
        self_attention_dropout_rate=0.1, src_attention_dropout_rate=0.1, normalize_before=True,
        use_flash_attn=False,
    )
    ctc = CTC(vocab, D_MODEL)
    tokens = ["<blank>", "<unk>"] + [f"t{i}" for i in range(2, vocab - 1)] + ["<sos/eos>"]
    return ESPnetASRModel(
        vocab, tokens, frontend=None, specaug=None, normalize=None, preencoder=None, encoder=encoder,
        postencoder=None, decoder=decoder, ctc=ctc, joint_network=None, ctc_weight=CTC_WEIGHT,
        lsm_weight=LSM, report_cer=False, report_wer=False,
    )


def espnet_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    loss, _, _ = model(b.feats, b.feat_lens, b.tokens, b.token_lens)
    return loss


class SpeechBrainASR(torch.nn.Module):
    """The modules of SpeechBrain's LibriSpeech transformer recipe (CNN, Transformer, ctc_lin, seq_lin),
    with the CNN widened to two 256-channel stride-2 blocks so it matches ESPnet's Conv2d 4x."""

    def __init__(self, vocab: int = VOCAB):
        super().__init__()
        from speechbrain.lobes.models.convolution import ConvolutionFrontEnd
        from speechbrain.lobes.models.transformer.TransformerASR import TransformerASR

        self.vocab = vocab
        self.cnn = ConvolutionFrontEnd(
            input_shape=(8, 10, 80), num_blocks=2, num_layers_per_block=1, out_channels=(D_MODEL, D_MODEL),
            kernel_sizes=(3, 3), strides=(2, 2), residuals=(False, False),
        )
        self.transformer = TransformerASR(
            tgt_vocab=vocab, input_size=D_MODEL * 20, d_model=D_MODEL, nhead=HEADS,
            num_encoder_layers=ENC_LAYERS, num_decoder_layers=DEC_LAYERS, d_ffn=FFN, dropout=0.1,
            activation=torch.nn.ReLU, normalize_before=True, attention_type="regularMHA",
        )
        self.ctc_lin = torch.nn.Linear(D_MODEL, vocab)
        self.seq_lin = torch.nn.Linear(D_MODEL, vocab)


def build_speechbrain(vocab: int = VOCAB) -> torch.nn.Module:
    return SpeechBrainASR(vocab)


def speechbrain_loss(model: SpeechBrainASR, b: Batch) -> torch.Tensor:
    """The recipe's compute_forward + compute_objectives (CTC + label-smoothed NLL, weight 0.3)."""
    from speechbrain.nnet.losses import ctc_loss, nll_loss

    bsz = b.tokens.shape[0]
    eos = model.vocab - 1
    rel = b.feat_lens.float() / b.feats.shape[1]  # SpeechBrain's relative lengths
    bos_col = b.tokens.new_full((bsz, 1), eos)
    tokens_bos = torch.cat([bos_col, b.tokens], 1)  # (B, U + 1)
    tokens_eos = torch.cat([b.tokens, b.tokens.new_zeros(bsz, 1)], 1)
    tokens_eos[torch.arange(bsz), b.token_lens] = eos
    src = model.cnn(b.feats)  # (B, T', 20, 256)
    enc, dec = model.transformer(src, tokens_bos, rel, pad_idx=0)
    p_ctc = torch.log_softmax(model.ctc_lin(enc), -1)
    p_seq = torch.log_softmax(model.seq_lin(dec), -1)
    u = b.tokens.shape[1]
    loss_seq = nll_loss(p_seq, tokens_eos, length=(b.token_lens + 1).float() / (u + 1), label_smoothing=LSM)
    loss_ctc = ctc_loss(p_ctc, b.tokens, rel, b.token_lens.float() / u, blank_index=0)
    return CTC_WEIGHT * loss_ctc + (1 - CTC_WEIGHT) * loss_seq


BUILDERS = {"espnet": (build_espnet, espnet_loss), "speechbrain": (build_speechbrain, speechbrain_loss)}
