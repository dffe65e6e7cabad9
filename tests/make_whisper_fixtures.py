"""Whisper's own outputs for tiny random models, as test fixtures for reading Whisper checkpoints in `asr`.

Every number stored here is computed by the peers' own code: openai-whisper (models, mel features,
tokenizers, greedy and beam search), transformers (the Hugging Face model and fast tokenizer) and
CTranslate2 (its converter). `asr` and its tests never import those packages: they read the plain files
written here (.pt readable with torch.load(weights_only=True), .json, .npz, .safetensors, CTranslate2's
model.bin).

The Hugging Face form is built with transformers' public API: a WhisperConfig from the OpenAI dims, a
WhisperForConditionalGeneration loaded (strictly) from the OpenAI state dict through a name table written here
(HF_NAMES) and written by save_pretrained; the fast tokenizer by transformers' tiktoken converter (the
TikTokenConverter that convert_tiktoken_to_fast runs) from openai-whisper's own tiktoken encoding, then
WhisperTokenizerFast.save_pretrained; the generation config from openai-whisper's tokenizer and suppression
list. The CTranslate2 forms are written by ctranslate2's TransformersConverter from that Hugging Face form.
No peer's code is copied here.

    tools/peers/.venv-whisper/bin/python tests/make_whisper_fixtures.py    # regenerate everything
    tools/peers/.venv-whisper/bin/python tests/make_whisper_fixtures.py --loss-only    # en/loss.pt alone

The venv comes from tools/peers/setup_whisper.sh. CI never runs this script (it only reads its outputs).
The whole output folder, tests/fixtures/whisper/, is deleted and rewritten; see its README.md.

Speech: the 8 utterances of LibriSpeech dev-clean (3) and test-clean (5) under ../shared/data (or
$ASR_TEST_DATA), sorted by utterance id, read with soundfile as float32 in [-1, 1].

Models: built by openai-whisper (`whisper.model.Whisper(ModelDimensions(...))`) after torch.manual_seed,
all widths 8, 2 heads:

    en      English-only (n_vocab 51864, 80 mels), 2 + 2 layers                 seed 0
    v3      multilingual like large-v3 (n_vocab 51866, 100 languages, 128 mels)  seed 1
    dtypes  English-only, 1 + 1 layers, only for CTranslate2's weight types     seed 2

Initialisation: Linear/Conv1d keep PyTorch's default init (done by the constructor under the seed); the
token and decoder positional embeddings (the latter is torch.empty in Whisper) are drawn from N(0, 1);
LayerNorm weights from 1 + 0.1 N(0, 1) and biases from 0.1 N(0, 1), so that a reader that drops a
LayerNorm is caught. Then two adjustments, each found necessary by trying:

  * audio: with the default init the text did not depend on the audio (the same tokens for all 8
    utterances): the mel's contribution through the two convolutions was small beside the sinusoidal
    positions, and the cross-attention was nearly uniform over the 1500 frames (most of them padding).
    So the convolution weights are multiplied by CONV_SCALE, the cross-attention query and key weights
    by CROSS_QK_SCALE and its value and output weights by CROSS_VO_SCALE.
  * end of text: the greedy decoders then never emitted <|endoftext|> (every output ran to the
    224-token limit; the tied output projection makes a random model repeat its last token), so the
    <|endoftext|> row of the token embedding is rescaled to the norm EOT_NORM[model]. The norms were
    chosen so that for en and v3 most greedy outputs end early, a few reach the limit, none is empty.

en and v3 are stored as OpenAI publishes them: the state dict in float16. Every reference output comes
from `whisper.load_model(<that file>)`, i.e. from exactly the stored float16 values cast to float32.
The Hugging Face form is checked (its logits equal whisper's) and so is CTranslate2's (its encoder output
and greedy tokens equal whisper's); those checks are reported in decode.json ("checks"), not used as
references. openai-whisper cannot run beam search on a batch of more than one mel (openai/whisper#2197):
the beam results are decoded one utterance at a time only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "whisper"

# Model dimensions (openai-whisper's ModelDimensions field names)
_BASE = dict(
    n_mels=80, n_audio_ctx=1500, n_audio_state=8, n_audio_head=2, n_audio_layer=2,
    n_vocab=51864, n_text_ctx=448, n_text_state=8, n_text_head=2, n_text_layer=2,
)
DIMS = {
    "en": dict(_BASE),
    "v3": dict(_BASE, n_mels=128, n_vocab=51866),
    "dtypes": dict(_BASE, n_audio_layer=1, n_text_layer=1),
}
SEEDS = {"en": 0, "v3": 1, "dtypes": 2}
CONV_SCALE = 4.0  # multiplies the encoder's two convolution weights
CROSS_QK_SCALE = 4.0  # multiplies the decoder's cross-attention query and key weights
CROSS_VO_SCALE = 3.0  # multiplies the decoder's cross-attention value and output weights
EOT_NORM = {"en": 15.0, "v3": 6.5, "dtypes": 15.0}  # norm of the <|endoftext|> embedding row (see the docstring)

N_FEATURES = 2  # utterances whose mel spectrograms go to features.npz


# -------------------------------------------------------------------------------------------------
# Data


def data_root() -> Path:
    env = os.environ.get("ASR_TEST_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for c in candidates:
        if (c / "LibriSpeech").is_dir():
            return c / "LibriSpeech"
    sys.exit("real speech not found: set ASR_TEST_DATA or place shared/data beside the repository")


def utterances() -> list[dict]:
    """The 8 utterances of dev-clean and test-clean, sorted by id: id, subset, audio, text."""
    root = data_root()
    utts = []
    for subset in ("dev-clean", "test-clean"):
        for trans in sorted((root / subset).glob("*/*/*.trans.txt")):
            for line in trans.read_text().splitlines():
                uid, text = line.split(" ", 1)
                flac = trans.parent / f"{uid}.flac"
                if flac.is_file():
                    audio, sr = sf.read(flac, dtype="float32")
                    assert sr == 16000 and audio.ndim == 1, (flac, sr, audio.shape)
                    utts.append(dict(id=uid, subset=subset, audio=audio, text=text))
    utts.sort(key=lambda u: u["id"])
    counts = {s: sum(u["subset"] == s for u in utts) for s in ("dev-clean", "test-clean")}
    if counts != {"dev-clean": 3, "test-clean": 5}:
        sys.exit(f"expected 3 dev-clean and 5 test-clean utterances, found {counts}")
    return utts


def transcript(text: str) -> str:
    """What the tokenizers encode: lower case with a leading space."""
    return " " + text.lower()


# -------------------------------------------------------------------------------------------------
# Models (openai-whisper)


def build_random(name: str):
    import whisper

    dims = whisper.model.ModelDimensions(**DIMS[name])
    torch.manual_seed(SEEDS[name])
    model = whisper.model.Whisper(dims)  # Linear / Conv1d: PyTorch's default init under the seed
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding):
                module.weight.normal_(0.0, 1.0)
            elif isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1.0 + 0.1 * torch.randn_like(module.weight))
                module.bias.copy_(0.1 * torch.randn_like(module.bias))
        model.decoder.positional_embedding.normal_(0.0, 1.0)  # torch.empty in Whisper
        model.encoder.conv1.weight *= CONV_SCALE  # let the mel outweigh the sinusoidal positions
        model.encoder.conv2.weight *= CONV_SCALE
        for block in model.decoder.blocks:  # make the text depend on the audio (see the docstring)
            block.cross_attn.query.weight *= CROSS_QK_SCALE
            block.cross_attn.key.weight *= CROSS_QK_SCALE
            block.cross_attn.value.weight *= CROSS_VO_SCALE
            block.cross_attn.out.weight *= CROSS_VO_SCALE
        eot = 50257 if model.is_multilingual else 50256
        row = model.decoder.token_embedding.weight[eot]
        row *= EOT_NORM[name] / row.norm()
    buffers = {n for n, _ in model.named_buffers()}
    assert "encoder.positional_embedding" in buffers and not any(
        n in buffers for n, _ in model.named_parameters()
    )
    return model.eval(), dims


def save_openai(model, dims, path: Path) -> dict:
    """OpenAI's checkpoint layout, float16 state dict. Returns that state dict."""
    state = {k: v.detach().to(torch.float16).clone() for k, v in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"dims": dataclasses.asdict(dims), "model_state_dict": state}, path)
    return state


def load_openai(path: Path):
    import whisper

    return whisper.load_model(str(path), device="cpu").eval()


def get_tokenizer(model, language="en", task="transcribe"):
    from whisper.tokenizer import get_tokenizer as gt

    return gt(model.is_multilingual, num_languages=model.num_languages, language=language, task=task)


def languages(tok) -> list[tuple[str, int]]:
    """(code, token id) of the tokenizer's languages in id order.

    whisper's all_language_codes / all_language_tokens come in the iteration order of a set of strings, which
    changes from one Python process to the next (hash randomisation): they are sorted by id here."""
    return sorted(zip(tok.all_language_codes, tok.all_language_tokens, strict=True), key=lambda p: p[1])


def tokenizer_info(tok) -> dict:
    return dict(
        encoding=tok.encoding.name,
        n_vocab=tok.encoding.n_vocab,
        eot=tok.eot,
        sot=tok.sot,
        no_speech=tok.no_speech,
        no_timestamps=tok.no_timestamps,
        transcribe=tok.transcribe,
        translate=tok.translate,
        sot_prev=tok.sot_prev,
        sot_lm=tok.sot_lm,
        timestamp_begin=tok.timestamp_begin,
        language_codes=[c for c, _ in languages(tok)],  # in token id order (see languages())
        language_tokens=[i for _, i in languages(tok)],
        non_speech_tokens=list(tok.non_speech_tokens),
        blank=tok.encode(" "),  # SuppressBlank: these ids and eot at the first sampled position
        sot_sequence=list(tok.sot_sequence),
        sot_sequence_including_notimestamps=list(tok.sot_sequence_including_notimestamps),
        special_tokens=dict(sorted(((k, v) for k, v in tok.special_tokens.items() if not k[2:3].isdigit()),
                                   key=lambda kv: kv[1])),  # timestamps left out: timestamp_begin + i
    )


# -------------------------------------------------------------------------------------------------
# Hugging Face form (transformers)
#
# Built with transformers' public API: a WhisperConfig from the OpenAI dims, a WhisperForConditionalGeneration
# filled from the OpenAI state dict through the name table HF_NAMES below (load_state_dict, strict), written by
# save_pretrained; the fast tokenizer by transformers' tiktoken converter from openai-whisper's own tiktoken
# encoding; the generation config from openai-whisper's tokenizer and suppression list. Checked below: the HF
# model's logits equal whisper's, the tokenizer's special ids and encodings equal openai-whisper's.

# OpenAI state-dict name -> the same tensor's name in transformers' WhisperForConditionalGeneration, written from
# the two module trees (whisper.model.Whisper; transformers' WhisperModel under `model.`). {i}: every block of
# that side; {p}: weight and bias. Whisper's attention key has no bias, nor has transformers' k_proj.
# proj_out.weight, the output projection, is the token embedding (tied), so it has no entry here.
HF_NAMES = {
    "encoder.conv1.{p}": "model.encoder.conv1.{p}",
    "encoder.conv2.{p}": "model.encoder.conv2.{p}",
    "encoder.positional_embedding": "model.encoder.embed_positions.weight",
    "encoder.blocks.{i}.attn.query.{p}": "model.encoder.layers.{i}.self_attn.q_proj.{p}",
    "encoder.blocks.{i}.attn.key.weight": "model.encoder.layers.{i}.self_attn.k_proj.weight",
    "encoder.blocks.{i}.attn.value.{p}": "model.encoder.layers.{i}.self_attn.v_proj.{p}",
    "encoder.blocks.{i}.attn.out.{p}": "model.encoder.layers.{i}.self_attn.out_proj.{p}",
    "encoder.blocks.{i}.attn_ln.{p}": "model.encoder.layers.{i}.self_attn_layer_norm.{p}",
    "encoder.blocks.{i}.mlp.0.{p}": "model.encoder.layers.{i}.fc1.{p}",
    "encoder.blocks.{i}.mlp.2.{p}": "model.encoder.layers.{i}.fc2.{p}",
    "encoder.blocks.{i}.mlp_ln.{p}": "model.encoder.layers.{i}.final_layer_norm.{p}",
    "encoder.ln_post.{p}": "model.encoder.layer_norm.{p}",
    "decoder.token_embedding.weight": "model.decoder.embed_tokens.weight",
    "decoder.positional_embedding": "model.decoder.embed_positions.weight",
    "decoder.blocks.{i}.attn.query.{p}": "model.decoder.layers.{i}.self_attn.q_proj.{p}",
    "decoder.blocks.{i}.attn.key.weight": "model.decoder.layers.{i}.self_attn.k_proj.weight",
    "decoder.blocks.{i}.attn.value.{p}": "model.decoder.layers.{i}.self_attn.v_proj.{p}",
    "decoder.blocks.{i}.attn.out.{p}": "model.decoder.layers.{i}.self_attn.out_proj.{p}",
    "decoder.blocks.{i}.attn_ln.{p}": "model.decoder.layers.{i}.self_attn_layer_norm.{p}",
    "decoder.blocks.{i}.cross_attn.query.{p}": "model.decoder.layers.{i}.encoder_attn.q_proj.{p}",
    "decoder.blocks.{i}.cross_attn.key.weight": "model.decoder.layers.{i}.encoder_attn.k_proj.weight",
    "decoder.blocks.{i}.cross_attn.value.{p}": "model.decoder.layers.{i}.encoder_attn.v_proj.{p}",
    "decoder.blocks.{i}.cross_attn.out.{p}": "model.decoder.layers.{i}.encoder_attn.out_proj.{p}",
    "decoder.blocks.{i}.cross_attn_ln.{p}": "model.decoder.layers.{i}.encoder_attn_layer_norm.{p}",
    "decoder.blocks.{i}.mlp.0.{p}": "model.decoder.layers.{i}.fc1.{p}",
    "decoder.blocks.{i}.mlp.2.{p}": "model.decoder.layers.{i}.fc2.{p}",
    "decoder.blocks.{i}.mlp_ln.{p}": "model.decoder.layers.{i}.final_layer_norm.{p}",
    "decoder.ln.{p}": "model.decoder.layer_norm.{p}",
}


def hf_names(dims: dict) -> dict[str, str]:
    """HF_NAMES with {i} and {p} spelt out for a model of these dims."""
    names = {}
    for src, dst in HF_NAMES.items():
        n_blocks = dims["n_audio_layer" if src.startswith("encoder") else "n_text_layer"] if "{i}" in src else 1
        for i in range(n_blocks):
            for p in ("weight", "bias") if "{p}" in src else ("",):
                names[src.format(i=i, p=p)] = dst.format(i=i, p=p)
    return names


def generation_config(whisper_model):
    """The generation config transformers would download, from openai-whisper's own values."""
    import whisper
    from transformers import GenerationConfig

    tok = get_tokenizer(whisper_model)
    task = whisper.decoding.DecodingTask(whisper_model, whisper.DecodingOptions(language="en"))
    cfg = GenerationConfig(
        bos_token_id=tok.eot,
        eos_token_id=tok.eot,
        pad_token_id=tok.eot,
        decoder_start_token_id=tok.sot,
        max_length=whisper_model.dims.n_text_ctx,
        suppress_tokens=list(task._get_suppress_tokens()),
        begin_suppress_tokens=tok.encode(" ") + [tok.eot],
        no_timestamps_token_id=tok.no_timestamps,
        prev_sot_token_id=tok.sot_prev,
        max_initial_timestamp_index=50,  # whisper's default max_initial_timestamp 1.0 s / 0.02 s
        is_multilingual=whisper_model.is_multilingual,
        lang_to_id={f"<|{c}|>": t for c, t in languages(tok)},
    )
    if whisper_model.is_multilingual:
        cfg.task_to_id = {"transcribe": tok.transcribe, "translate": tok.translate}
    else:
        cfg.forced_decoder_ids = [[1, tok.no_timestamps]]
    return cfg


def hf_model(whisper_model, state: dict):
    """transformers' WhisperForConditionalGeneration holding `state` (whisper_model's OpenAI state dict) as float32."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    dims = dataclasses.asdict(whisper_model.dims)
    assert dims["n_audio_state"] == dims["n_text_state"], dims  # transformers has one d_model
    tok = get_tokenizer(whisper_model)
    config = WhisperConfig(
        vocab_size=dims["n_vocab"],
        num_mel_bins=dims["n_mels"],
        d_model=dims["n_audio_state"],
        encoder_layers=dims["n_audio_layer"],
        encoder_attention_heads=dims["n_audio_head"],
        encoder_ffn_dim=state["encoder.blocks.0.mlp.0.weight"].shape[0],  # 4 * d_model in Whisper
        decoder_layers=dims["n_text_layer"],
        decoder_attention_heads=dims["n_text_head"],
        decoder_ffn_dim=state["decoder.blocks.0.mlp.0.weight"].shape[0],
        max_source_positions=dims["n_audio_ctx"],
        max_target_positions=dims["n_text_ctx"],
        # Whisper's special ids, as the published Hugging Face configs hold them: <|endoftext|> is bos, eos and
        # pad, generation starts from <|startoftranscript|>, and the first sampled token is never a blank or eot
        bos_token_id=tok.eot,
        eos_token_id=tok.eot,
        pad_token_id=tok.eot,
        decoder_start_token_id=tok.sot,
        begin_suppress_tokens=tok.encode(" ") + [tok.eot],
    )
    assert config.tie_word_embeddings  # proj_out is embed_tokens
    model = WhisperForConditionalGeneration(config)
    names = hf_names(dims)
    if set(names) != set(state):
        raise ValueError(f"state dict names not in HF_NAMES: {sorted(set(state) - set(names))}; "
                         f"missing from the state dict: {sorted(set(names) - set(state))}")
    weights = {names[k]: v.float() for k, v in state.items()}
    weights["proj_out.weight"] = weights["model.decoder.embed_tokens.weight"]
    model.load_state_dict(weights, strict=True)
    assert model.proj_out.weight is model.model.decoder.embed_tokens.weight  # still tied
    model.generation_config = generation_config(whisper_model)
    return model.eval()


class _RanksBelow:
    """A tiktoken rank table that hides the ranks from `limit` up (for tiktoken's reference bpe_encode)."""

    def __init__(self, ranks: dict[bytes, int], limit: int):
        self.ranks, self.limit = ranks, limit

    def get(self, token: bytes):
        rank = self.ranks.get(token)
        return rank if rank is not None and rank < self.limit else None

    def __getitem__(self, token: bytes) -> int:
        return self.ranks[token]


def hf_tokenizer(wtok, out_dir: Path, n_mels: int) -> None:
    """The fast tokenizer of openai-whisper's tokenizer `wtok` (tokenizer.json, tokenizer_config.json,
    special_tokens_map.json) and the feature extractor's preprocessor_config.json, written into out_dir.

    transformers' tiktoken converter (TikTokenConverter, what transformers.integrations.tiktoken.
    convert_tiktoken_to_fast runs) reads the BPE ranks from the file whisper's encoding was built from (its
    bundled assets/<encoding name>): convert_tiktoken_to_fast itself cannot serve, as it first writes the ranks
    out with tiktoken's dump_tiktoken_bpe, which needs blobfile and writes the multilingual encoding's empty token
    (rank 50256) as a line that tiktoken then cannot read back. The encoding's special tokens follow in id order:
    those up to <|notimestamps|> added as special tokens by the converter, the 1501 timestamps as ordinary added
    tokens (as in Hugging Face's Whisper tokenizers). The post-processor is WhisperTokenizerFast's, from
    set_prefix_tokens (<|startoftranscript|>, <|notimestamps|>, text, <|endoftext|> when special tokens are asked).

    The converter lists as merges every split of a token into two tokens (108,299 for gpt2.tiktoken); a BPE
    that always merges the best-ranked pair only uses, for each token, the split that tiktoken's reference
    implementation (tiktoken._educational.bpe_encode) ends with when it builds the token from its bytes with the
    lower ranks only. Only those 50,000 merges are kept (tokenizer.json a third smaller); the encodings are
    checked against tiktoken's by check_hf_tokenizer."""
    import whisper
    from tiktoken._educational import bpe_encode
    from tiktoken.load import load_tiktoken_bpe
    from tokenizers import AddedToken, Tokenizer
    from transformers import WhisperFeatureExtractor, WhisperTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = wtok.encoding
    ranks_file = Path(whisper.__file__).parent / "assets" / enc.name  # whisper names the encoding after its file
    specials = sorted(enc.special_tokens_set, key=enc.encode_single_token)
    timestamps = [t for t in specials if enc.encode_single_token(t) >= wtok.timestamp_begin]
    specials = specials[: len(specials) - len(timestamps)]
    converted = TikTokenConverter(vocab_file=str(ranks_file), pattern=enc._pat_str,
                                  additional_special_tokens=specials).converted()

    ranks = load_tiktoken_bpe(str(ranks_file))
    data = json.loads(converted.to_str())
    spelling = {i: s for s, i in data["model"]["vocab"].items()}  # rank -> the token as the vocabulary spells it
    used = set()
    for token, rank in ranks.items():
        if len(token) > 1:
            left, right = bpe_encode(_RanksBelow(ranks, rank), token, visualise=None)
            used.add((spelling[left], spelling[right]))
    data["model"]["merges"] = [m for m in data["model"]["merges"] if tuple(m) in used]
    assert len(data["model"]["merges"]) == len(used), (len(data["model"]["merges"]), len(used))

    out_dir.mkdir(parents=True, exist_ok=True)
    pruned = Tokenizer.from_str(json.dumps(data))
    pruned.add_tokens([AddedToken(t, special=False) for t in timestamps])
    with tempfile.TemporaryDirectory() as tmp:
        pruned.save(str(Path(tmp) / "tokenizer.json"))
        fast = WhisperTokenizerFast(tokenizer_file=str(Path(tmp) / "tokenizer.json"),
                                    additional_special_tokens=[t for t in specials if t != "<|endoftext|>"])
        fast.set_prefix_tokens()
        fast.save_pretrained(out_dir, legacy_format=False)
    fast.backend_tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)  # compact: half the size
    WhisperFeatureExtractor(feature_size=n_mels).save_pretrained(out_dir)


def check_hf_tokenizer(hf_dir: Path, wtok, texts: list[str]) -> None:
    """The fast tokenizer (tokenizers and transformers) has whisper's special ids and encodings."""
    import whisper
    from tokenizers import Tokenizer
    from transformers import WhisperTokenizerFast

    raw = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    fast = WhisperTokenizerFast.from_pretrained(hf_dir)
    special = dict(wtok.special_tokens)
    for name, i in special.items():
        assert raw.token_to_id(name) == i, (name, raw.token_to_id(name), i)
        assert fast.convert_tokens_to_ids(name) == i, (name, fast.convert_tokens_to_ids(name), i)
    assert raw.get_vocab_size() == wtok.encoding.n_vocab == wtok.timestamp_begin + 1501, raw.get_vocab_size()
    for text in texts:
        ids = wtok.encode(text)
        assert raw.encode(text, add_special_tokens=False).ids == ids, text
        assert fast.encode(text, add_special_tokens=False) == ids, text
        assert raw.decode(ids) == wtok.decode(ids) == text, text
    # more text: whisper's English spelling table (about 1,700 British and American spellings) and language names
    spellings = (Path(whisper.__file__).parent / "normalizers" / "english.json").read_text()
    more = spellings + " ".join(whisper.tokenizer.LANGUAGES.values()) + " ".join(whisper.tokenizer.LANGUAGES)
    assert raw.encode(more, add_special_tokens=False).ids == wtok.encoding.encode_ordinary(more)


def check_hf_model(hf_dir: Path, model, mel, tokens, ref_logits) -> float:
    from transformers import WhisperForConditionalGeneration

    hf = WhisperForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf(input_features=mel[None], decoder_input_ids=torch.tensor([tokens])).logits[0]
    diff = (out - ref_logits).abs().max().item()
    assert diff <= 1e-5, diff
    return diff


# Parameters of the Hugging Face model whose gradients loss.pt stores (besides the token embedding's rows)
LOSS_GRADS = (
    "model.encoder.conv1.weight",
    "model.encoder.conv2.bias",
    "model.encoder.layers.0.self_attn.q_proj.weight",
    "model.encoder.layers.1.self_attn.k_proj.weight",
    "model.encoder.layers.1.fc1.weight",
    "model.encoder.layer_norm.weight",
    "model.decoder.layers.0.self_attn.v_proj.weight",
    "model.decoder.layers.1.encoder_attn.q_proj.weight",
    "model.decoder.layers.1.encoder_attn.k_proj.weight",
    "model.decoder.layers.1.fc2.weight",
    "model.decoder.layer_norm.bias",
    "model.decoder.embed_positions.weight",  # only the first L rows are stored
)
N_LOSS = 2  # utterances in the fine-tuning batch of loss.pt


def loss_reference(hf_dir: Path, wtok, mels: torch.Tensor, ids: list[str], texts: list[str]) -> dict:
    """transformers' training loss and gradients of the Hugging Face model in hf_dir on one batch (loss.pt),
    in float32 as fine-tuning runs and again in float64 (`float64`: the same keys, the weights and input
    features cast up), where rounding no longer hides a difference in the arithmetic; `input_features`: the
    float32 log-mels both read.

    The batch is the first N_LOSS utterances: input_features their log-mels (`mels`, as for decoding);
    decoder_input_ids the prompt (sot sequence with <|notimestamps|>) + the transcript's tokens, right-padded
    with eot; labels -100 under the prompt but its last token, then the transcript's tokens and eot (label i is
    the token after input i), -100 under the padding. The model is in training mode with every dropout 0, so
    the loss and gradients are those of fine-tuning, deterministic."""
    ref = _loss_reference(hf_dir, wtok, mels, ids, texts, torch.float32)
    ref64 = _loss_reference(hf_dir, wtok, mels, ids, texts, torch.float64)
    ref["float64"] = {k: ref64[k] for k in ("loss_tensor", "grads", "embed_grad", "grad_norm_total")}
    ref["input_features"] = mels[:N_LOSS].float().clone()
    return ref


def _loss_reference(hf_dir: Path, wtok, mels: torch.Tensor, ids: list[str], texts: list[str],
                    dtype: torch.dtype) -> dict:
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(hf_dir, dtype=dtype)
    cfg = model.config
    zero = dict(dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
                activation_dropout=cfg.activation_dropout, encoder_layerdrop=cfg.encoder_layerdrop,
                decoder_layerdrop=cfg.decoder_layerdrop)
    assert all(v == 0 for v in zero.values()), zero
    assert not cfg.apply_spec_augment  # else training mode masks the features at random
    assert model.proj_out.weight is model.model.decoder.embed_tokens.weight
    model.train()
    model.zero_grad(set_to_none=True)

    prompt = list(wtok.sot_sequence_including_notimestamps)
    text_tokens = [wtok.encode(t) for t in texts[:N_LOSS]]
    length = len(prompt) + max(len(t) for t in text_tokens)
    inputs, labels, mask = [], [], []
    for t in text_tokens:
        pad = length - len(prompt) - len(t)
        inputs.append(prompt + t + [wtok.eot] * pad)
        labels.append([-100] * (len(prompt) - 1) + t + [wtok.eot] + [-100] * pad)
        mask.append([1] * (len(prompt) + len(t)) + [0] * pad)
    decoder_input_ids = torch.tensor(inputs, dtype=torch.int64)
    labels_t = torch.tensor(labels, dtype=torch.int64)
    out = model(input_features=mels[:N_LOSS].float().to(dtype), decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=torch.tensor(mask, dtype=torch.int64), labels=labels_t)
    out.loss.backward()

    params = dict(model.named_parameters())  # the tied proj_out.weight appears once, as embed_tokens
    no_grad = sorted(n for n, q in params.items() if q.grad is None)
    assert no_grad == ["model.encoder.embed_positions.weight"], no_grad  # frozen sinusoids
    total = sum(q.grad.double().pow(2).sum() for q in params.values() if q.grad is not None).sqrt()
    grads = {n: params[n].grad.detach().clone() for n in LOSS_GRADS}
    positions = grads["model.decoder.embed_positions.weight"]
    assert not positions[length:].any()
    grads["model.decoder.embed_positions.weight"] = positions[:length].contiguous()
    embed = params["model.decoder.embed_tokens.weight"].grad.detach()
    rows = sorted(set(decoder_input_ids.flatten().tolist()) | set(labels_t[labels_t != -100].tolist()))
    return dict(
        utterances=ids[:N_LOSS],
        texts=texts[:N_LOSS],
        prompt=prompt,
        text_tokens=text_tokens,
        decoder_input_ids=decoder_input_ids,
        labels=labels_t,
        loss=float(out.loss.item()),
        loss_tensor=out.loss.detach().double(),
        num_label_tokens=int((labels_t != -100).sum().item()),
        grads=grads,
        embed_rows=torch.tensor(rows, dtype=torch.int64),
        embed_grad=embed[rows].clone(),
        embed_grad_norm=float(embed.double().norm().item()),  # all rows: the output layer's gradient too
        grad_norm_total=float(total.item()),
        no_grad_params=no_grad,
        attn_implementation=str(cfg._attn_implementation),
    )


# -------------------------------------------------------------------------------------------------
# CTranslate2


def convert_ct2(hf_dir: Path, out: Path, quantization: str, copy_files=None) -> None:
    import ctranslate2

    ctranslate2.converters.TransformersConverter(str(hf_dir), copy_files=copy_files).convert(
        str(out), quantization=quantization, force=True
    )


def check_ct2(ct2_dir: Path, mels: torch.Tensor, audio_features0: torch.Tensor, tok, greedy: list[dict]) -> dict:
    """CTranslate2's encoder and greedy search against whisper's (reported, not stored)."""
    import ctranslate2

    m = ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32")
    feats = ctranslate2.StorageView.from_array(np.ascontiguousarray(mels.numpy()))
    first = ctranslate2.StorageView.from_array(np.ascontiguousarray(mels[:1].numpy()))
    enc = np.array(m.encode(first, to_cpu=True))
    enc_diff = float(np.abs(enc - audio_features0.numpy()).max())
    prompt = list(tok.sot_sequence_including_notimestamps)
    # CTranslate2's Whisper generates at most max_length // 2 tokens here: 448 gives whisper's 224
    res = m.generate(feats, [prompt] * mels.shape[0], beam_size=1, max_length=448,
                     suppress_blank=True, suppress_tokens=[-1], return_scores=True, return_no_speech_prob=True)
    same = sum(r.sequences_ids[0] == g["tokens"] for r, g in zip(res, greedy, strict=True))
    return dict(encoder_max_abs_diff=enc_diff, greedy_same_tokens=f"{same}/{len(greedy)}")


# -------------------------------------------------------------------------------------------------
# Reference outputs (openai-whisper)


def forward_reference(model, mel, text: str) -> dict:
    tok = get_tokenizer(model)
    tokens = list(tok.sot_sequence_including_notimestamps) + tok.encode(transcript(text)) + [tok.eot]
    with torch.no_grad():
        af = model.encoder(mel[None])
        logits = model.decoder(torch.tensor([tokens]), af)[0]
    return dict(
        audio_features=af.float().contiguous(),
        tokens=torch.tensor(tokens, dtype=torch.int64),
        logits_sub=logits[:, ::7].float().contiguous(),
        logsumexp=logits.logsumexp(-1).float().contiguous(),
        logits_argmax=logits.argmax(-1).to(torch.int64),
    ), logits


def option_sets(multilingual: bool) -> dict:
    """Name -> DecodingOptions keywords (besides fp16=False and the default suppression)."""
    lang = None if multilingual else "en"  # an English-only model cannot detect the language
    sets = {
        "greedy": dict(temperature=0.0, without_timestamps=True, language=lang),
        "beam5": dict(temperature=0.0, beam_size=5, patience=1.0, without_timestamps=True, language=lang),
        "greedy_timestamps": dict(temperature=0.0, without_timestamps=False, language=lang),
        "beam5_timestamps": dict(temperature=0.0, beam_size=5, patience=1.0, without_timestamps=False, language=lang),
    }
    if multilingual:
        sets["greedy_translate"] = dict(temperature=0.0, without_timestamps=True, language="en", task="translate")
        sets["beam5_translate"] = dict(temperature=0.0, beam_size=5, patience=1.0, without_timestamps=True,
                                      language="en", task="translate")
    return sets


def result_dict(r) -> dict:
    return dict(
        tokens=[int(t) for t in r.tokens],
        text=r.text,
        avg_logprob=float(r.avg_logprob),
        sum_logprob=float(r.avg_logprob) * (len(r.tokens) + 1),
        no_speech_prob=float(r.no_speech_prob),
        language=r.language,
    )


def compare(batched: list[dict], alone: list[dict], ids: list[str]) -> dict:
    """Batched against alone: which utterances' tokens/text/language differ, largest float differences."""
    differ = [uid for uid, b, a in zip(ids, batched, alone, strict=True)
              if (b["tokens"], b["text"], b["language"]) != (a["tokens"], a["text"], a["language"])]
    same = [i for i, uid in enumerate(ids) if uid not in differ]
    return dict(
        differing_utterances=differ,
        max_abs_diff={k: max((abs(batched[i][k] - alone[i][k]) for i in same), default=0.0)
                      for k in ("avg_logprob", "sum_logprob", "no_speech_prob")},
    )


def decode_all(model, mels: torch.Tensor, ids: list[str]) -> dict:
    import whisper

    out = {}
    for name, kw in option_sets(model.is_multilingual).items():
        options = whisper.DecodingOptions(fp16=False, suppress_tokens="-1", suppress_blank=True, **kw)
        task = whisper.decoding.DecodingTask(model, options)
        filters = [type(f).__name__ for f in task.logit_filters]
        suppress = [f for f in task.logit_filters if isinstance(f, whisper.decoding.SuppressTokens)][0]
        assert sorted(suppress.suppress_tokens) == list(task._get_suppress_tokens())
        t0 = time.time()
        alone = [result_dict(whisper.decode(model, mels[i : i + 1], options)[0]) for i in range(len(ids))]
        try:
            batched = [result_dict(r) for r in whisper.decode(model, mels, options)]
            batched_error = None
            diffs = compare(batched, alone, ids)
        except RuntimeError as e:
            # openai-whisper's beam search (and best-of-n) fails on batches of more than one mel: it repeats
            # the tokens but not the audio features by the beam size (openai/whisper#2197, #2389, unmerged).
            if options.beam_size is None:
                raise
            batched, batched_error, diffs = None, f"RuntimeError: {e}", None
        out[name] = dict(
            options=dataclasses.asdict(options),
            suppress_tokens=list(task._get_suppress_tokens()),
            logit_filters=filters,
            sot_sequence=list(task.sot_sequence),
            initial_tokens=list(task.initial_tokens),
            sample_begin=task.sample_begin,
            sample_len=task.sample_len,
            batched=batched,
            batched_error=batched_error,
            alone=alone,
            batched_vs_alone=diffs,
        )
        lens = [len(r["tokens"]) for r in alone]
        print(f"  {name:18s} {time.time() - t0:5.1f}s  lengths {lens}  batched vs alone {diffs or batched_error}",
              flush=True)
    return out


# -------------------------------------------------------------------------------------------------


def main() -> None:
    import whisper

    t_start = time.time()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    utts = utterances()
    ids = [u["id"] for u in utts]
    texts = [transcript(u["text"]) for u in utts]
    print("utterances:", ids, flush=True)

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="whisper_fixtures_"))

    # Features
    feats = {}
    mels = {}
    for n_mels in (80, 128):
        mels[n_mels] = torch.stack(
            [whisper.log_mel_spectrogram(whisper.pad_or_trim(u["audio"]), n_mels=n_mels) for u in utts]
        )
    for u in utts[:N_FEATURES]:
        feats[f"mel80_{u['id']}"] = mels[80][ids.index(u["id"])].numpy()
    feats[f"mel128_{ids[0]}"] = mels[128][0].numpy()
    feats[f"mel80_nopad_{ids[0]}"] = whisper.log_mel_spectrogram(utts[0]["audio"]).numpy()
    feats["utterance_ids"] = np.array(ids)
    np.savez_compressed(OUT / "features.npz", **feats)

    report: dict = {}
    decode_json: dict = {
        "utterances": ids,
        "note": "sum_logprob = avg_logprob * (len(tokens) + 1), as whisper's avg_logprob is sum_logprob / "
        "(len(tokens) + 1) (the +1 counts the end-of-text token). 'batched': the 8 mels decoded as one "
        "batch; 'alone': each utterance as a batch of 1. For beam search 'batched' is null: openai-whisper "
        "20250625 raises on batches of more than one mel with beam_size (openai/whisper#2197), see "
        "'batched_error'.",
        "tokenizers": {},
        "models": {},
    }
    tokenize_json: dict = {"utterances": ids}

    # en and v3: OpenAI checkpoint, reference outputs
    models = {}
    for name in ("en", "v3"):
        t0 = time.time()
        random_model, dims = build_random(name)
        state = save_openai(random_model, dims, OUT / name / "openai.pt")
        model = load_openai(OUT / name / "openai.pt")
        models[name] = (model, state, dims)
        tok = get_tokenizer(model)
        n_mels = dims.n_mels
        fwd, logits = forward_reference(model, mels[n_mels][0], utts[0]["text"])
        torch.save(fwd, OUT / name / "forward.pt")
        print(f"{name}: built and saved ({time.time() - t0:.1f}s); decoding", flush=True)
        decode_json["tokenizers"][name] = tokenizer_info(tok)
        decode_json["models"][name] = dict(dims=dataclasses.asdict(dims), **decode_all(model, mels[n_mels], ids))
        tokenize_json[name] = dict(
            transcripts=[dict(id=i, text=t, ids=tok.encode(t)) for i, t in zip(ids, texts, strict=True)],
            special=tokenizer_info(tok)["special_tokens"],
        )
        first = decode_json["models"][name]["greedy"]["alone"][0]["tokens"]
        tokenize_json[name]["first_greedy"] = dict(id=ids[0], tokens=first, decode=tok.decode(first))
        first_ts = decode_json["models"][name]["greedy_timestamps"]["alone"][0]["tokens"]
        tokenize_json[name]["first_greedy_timestamps"] = dict(
            id=ids[0], tokens=first_ts, decode=tok.decode(first_ts),
            decode_with_timestamps=tok.decode_with_timestamps(first_ts),
        )
        report[name] = dict(forward_logits=logits)  # for the Hugging Face check below

    # Tokenizers (transformers' tiktoken converter), checked against openai-whisper's
    t0 = time.time()
    en_model, en_state, en_dims = models["en"]
    v3_model, _, v3_dims = models["v3"]
    en_hf = OUT / "en" / "hf"
    hf_tokenizer(get_tokenizer(en_model), en_hf, en_dims.n_mels)
    check_hf_tokenizer(en_hf, get_tokenizer(en_model), texts)
    v3_tok_dir = work / "v3_tokenizer"
    hf_tokenizer(get_tokenizer(v3_model), v3_tok_dir, v3_dims.n_mels)
    check_hf_tokenizer(v3_tok_dir, get_tokenizer(v3_model), texts)
    shutil.copy(v3_tok_dir / "tokenizer.json", OUT / "v3" / "tokenizer.json")
    print(f"tokenizers converted and checked ({time.time() - t0:.1f}s)", flush=True)

    # en: Hugging Face and CTranslate2 forms
    t0 = time.time()
    hf = hf_model(en_model, en_state)
    hf.save_pretrained(en_hf, safe_serialization=True)
    fwd = torch.load(OUT / "en" / "forward.pt", weights_only=True)
    report["en"]["hf_logits_max_abs_diff"] = check_hf_model(
        en_hf, en_model, mels[80][0], fwd["tokens"].tolist(), report["en"].pop("forward_logits")
    )
    convert_ct2(en_hf, OUT / "en" / "ct2", "float16", copy_files=["tokenizer.json", "preprocessor_config.json"])
    report["en"]["ct2"] = check_ct2(
        OUT / "en" / "ct2", mels[80], fwd["audio_features"][0], get_tokenizer(en_model),
        decode_json["models"]["en"]["greedy"]["alone"],
    )
    loss = loss_reference(en_hf, get_tokenizer(en_model), mels[80], ids, texts)
    torch.save(loss, OUT / "en" / "loss.pt")
    print(f"en: loss.pt: loss {loss['loss']:.6f} over {loss['num_label_tokens']} labels, "
          f"gradient norm {loss['grad_norm_total']:.6f}", flush=True)
    print(f"en: HF and CTranslate2 forms ({time.time() - t0:.1f}s): {report['en']}", flush=True)

    # dtypes: float32 weights (not float16-rounded), HF then CTranslate2 in three weight types
    t0 = time.time()
    dt_model, _ = build_random("dtypes")
    dt_state = {k: v.detach().clone() for k, v in dt_model.state_dict().items()}
    dt_hf_work = work / "dtypes_hf"
    dt_hf = hf_model(dt_model, dt_state)
    dt_hf.save_pretrained(dt_hf_work, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "preprocessor_config.json"):
        shutil.copy(en_hf / f, dt_hf_work / f)  # the converter reads the vocabulary from the tokenizer
    for q in ("float32", "bfloat16", "int8"):
        convert_ct2(dt_hf_work, OUT / "dtypes" / f"ct2_{q}", q)
    (OUT / "dtypes" / "hf").mkdir(parents=True)
    for f in ("model.safetensors", "config.json", "generation_config.json"):
        shutil.copy(dt_hf_work / f, OUT / "dtypes" / "hf" / f)
    print(f"dtypes: HF and CTranslate2 forms ({time.time() - t0:.1f}s)", flush=True)

    # JSON
    decode_json["checks"] = dict(
        tokenizers="tokenizer.json (en/hf, v3): the ids of every special token, the vocabulary size and the "
        "encoding and decoding of the 8 transcripts equal openai-whisper's (asserted)",
        en=report["en"],
    )
    (OUT / "decode.json").write_text(json.dumps(decode_json, indent=1) + "\n")
    (OUT / "tokenize.json").write_text(json.dumps(tokenize_json, indent=1, ensure_ascii=False) + "\n")
    shutil.rmtree(work)
    write_readme(summarize(decode_json), decode_json["checks"])
    listing, total, packed = sizes()
    for f, n in listing:
        print(f"{n:>10,d}  {f}")
    print(f"total {total / 1e6:.1f} MB, in git about {packed / 1e6:.1f} MB; done in {time.time() - t_start:.1f}s")


def summarize(decode_json: dict) -> list[str]:
    lines = []
    for name, m in decode_json["models"].items():
        for opt, d in m.items():
            if opt == "dims":
                continue
            lens = [len(r["tokens"]) for r in d["alone"]]
            empty = sum(n == 0 for n in lens)
            limit = sum(n >= d["sample_len"] for n in lens)
            langs = sorted({r["language"] for r in d["alone"]})
            if d["batched_vs_alone"] is None:
                cmp = "batched: not possible (openai-whisper raises)"
            else:
                c = d["batched_vs_alone"]
                cmp = (f"batched = alone except {c['differing_utterances']}" if c["differing_utterances"]
                       else "batched = alone (tokens, text, language)")
                cmp += ", floats within " + ", ".join(f"{k} {v:.1e}" for k, v in c["max_abs_diff"].items())
            lines.append(f"{name:3s} {opt:17s} lengths {lens}  empty {empty}, at 224 {limit}, "
                         f"languages {langs}; {cmp}")
    print("\n".join(lines))
    return lines


def sizes() -> tuple[list[tuple[str, int]], int, int]:
    """Files and sizes; total bytes; bytes git would hold (distinct contents, zlib-compressed)."""
    import hashlib
    import zlib

    files = sorted(p for p in OUT.rglob("*") if p.is_file())
    listing = [(str(p.relative_to(OUT)), p.stat().st_size) for p in files]
    blobs = {}
    for p in files:
        data = p.read_bytes()
        blobs.setdefault(hashlib.sha1(data).hexdigest(), len(zlib.compress(data, 6)))
    return listing, sum(n for _, n in listing), sum(blobs.values())


def write_readme(summary: list[str], checks: dict) -> None:
    from importlib.metadata import version

    versions = ", ".join(f"{p} {version(p)}" for p in (
        "openai-whisper", "transformers", "ctranslate2", "tokenizers", "tiktoken", "torch", "numpy", "soundfile"))
    readme = OUT / "README.md"
    readme.write_text("x")  # counted in the sizes below with a placeholder, rewritten just after
    listing, total, packed = sizes()
    files = "\n".join(f"    {n:>9,d}  {f}" for f, n in listing if f != "README.md")
    summary_text = "\n".join("    " + line for line in summary)
    text = f"""# Whisper reference fixtures

Written by `tests/make_whisper_fixtures.py` (its docstring tells how the models are built), with the peers'
own code only: {versions}.
Regenerate with `tools/peers/.venv-whisper/bin/python tests/make_whisper_fixtures.py` (venv:
`tools/peers/setup_whisper.sh`; under a minute on 2 CPU cores). CI never runs it; tests only read these
files (.pt with `torch.load(weights_only=True)`, .json, .npz, .safetensors, CTranslate2's model.bin).

Speech: the 8 utterances of LibriSpeech dev-clean (3) and test-clean (5), sorted by id (`utterances` in
the JSON files). Models: random, width 8, 2 heads, seeded; `en` English-only (2 + 2 layers, 80 mels,
n_vocab 51864), `v3` multilingual like large-v3 (2 + 2 layers, 128 mels, n_vocab 51866, 100 languages),
`dtypes` English-only (1 + 1 layers) for CTranslate2's weight types only.

## Files

- `features.npz`: `whisper.log_mel_spectrogram(whisper.pad_or_trim(audio), n_mels=80)` of the first 2
  utterances (`mel80_<id>`, 80 x 3000), of the first with 128 mels (`mel128_<id>`) and of its unpadded audio
  (`mel80_nopad_<id>`, `whisper.log_mel_spectrogram(audio)`); `utterance_ids`: the 8 ids.
- `en/openai.pt`, `v3/openai.pt`: OpenAI's checkpoint layout, `{{"dims": ..., "model_state_dict": ...}}`, float16.
  Every reference output comes from `whisper.load_model` of these files (the float16 values as float32).
- `en/forward.pt`, `v3/forward.pt`: first utterance: `audio_features` = encoder(mel) (1, 1500, 8);
  teacher forcing on `tokens` = sot sequence with <|notimestamps|> (v3: en, transcribe) + transcript
  (lower case, leading space) + eot: `logits_sub` = logits[:, ::7], `logsumexp`, `logits_argmax`.
- `en/loss.pt`: transformers' fine-tuning loss and gradients of `en/hf/` (float32, `train()`, every dropout
  0) on the first 2 utterances (`utterances`, `texts`): `input_features` their 80-mel log-mels as above
  (stored, float32), `decoder_input_ids` = `prompt` (sot, notimestamps) + `text_tokens`, right-padded with eot,
  `decoder_attention_mask` 0 on the padding, `labels` = -100 under the prompt but its last token, the text
  tokens, eot, -100 under the padding; `loss` (float; `loss_tensor` float64) = the mean cross-entropy over
  the `num_label_tokens` labels; after `loss.backward()`: `grads` by HF parameter name (of
  `model.decoder.embed_positions.weight` the first L rows only), the token embedding's gradient (tied with
  proj_out, so the output layer's included) at the rows `embed_rows` (the ids in the inputs or labels) as
  `embed_grad`, `embed_grad_norm` (all its rows), `grad_norm_total` (2-norm over every parameter's
  gradient; `no_grad_params`: the frozen encoder positions), `attn_implementation` (the one transformers chose);
  `float64`: `loss_tensor`, `grads`, `embed_grad` and `grad_norm_total` again with the model and
  `input_features` cast to float64, where float32 rounding no longer hides a difference in the arithmetic.
- `en/hf/`: the Hugging Face form of `en/openai.pt` (transformers' WhisperForConditionalGeneration,
  float32 safetensors, config, generation config built from openai-whisper's values) with its fast
  tokenizer (transformers' tiktoken converter of openai-whisper's encoding, with the 50,000 merges a BPE
  uses; `tokenizer.json` written compact by tokenizers, `tokenizer_config.json`, `special_tokens_map.json`
  by WhisperTokenizerFast) and `preprocessor_config.json`.
- `en/ct2/`: CTranslate2's conversion of `en/hf/` with quantization float16 (faster-whisper's form), with
  `tokenizer.json` and `preprocessor_config.json` copied by the converter.
- `v3/tokenizer.json`: the multilingual (100 languages) fast tokenizer, made the same way.
- `dtypes/hf/`: the `dtypes` model in Hugging Face form (float32 weights, not rounded to float16);
  `dtypes/ct2_float32/`, `dtypes/ct2_bfloat16/`, `dtypes/ct2_int8/`: its CTranslate2 conversions.
- `decode.json`: per tokenizer (`tokenizers.en`, `tokenizers.v3`) the special ids, language codes (sorted
  by token id: whisper's `all_language_codes` comes in a set's iteration order, which changes between
  Python processes), non-speech tokens and blank ids; per model and option set (`models.<en|v3>.<set>`)
  the options, suppressed ids, logit filters, sot sequence, sample_begin, and per utterance `tokens`,
  `text`, `avg_logprob`, `sum_logprob` (= avg_logprob * (len(tokens) + 1)), `no_speech_prob`, `language`,
  decoded as one batch of 8 (`batched`) and one at a time (`alone`). en decodes with language "en" (an
  English-only model cannot detect it); v3 detects the language (language None) except in the
  `*_translate` sets (language en, task translate). `checks`: the Hugging Face logits and CTranslate2's
  encoder and greedy search against openai-whisper (computed, not reference data).
- `tokenize.json`: per tokenizer the 8 transcripts and openai-whisper's ids, and the decode of the first
  greedy result (with and without timestamps).

## Decoding summary (lengths per utterance, `alone`)

{summary_text}

openai-whisper 20250625 cannot decode a batch of more than one mel with beam search (it repeats the
tokens but not the audio features by the beam size: openai/whisper#2197), so `batched` is null there.
Checks: {json.dumps(checks)}

## Sizes (bytes)

{files}

Total {total / 1e6:.1f} MB on disk; git holds {packed / 1e6:.1f} MB (identical files, e.g. the copies of
tokenizer.json and vocabulary.json, are one blob; zlib-compressed).
"""
    readme.write_text(text)


def loss_only() -> None:
    """Rewrite en/loss.pt alone from the en/hf/ already there (the rest of the folder is kept): the float32
    part must come out as the file held it, bit for bit."""
    import whisper

    torch.set_num_threads(min(2, torch.get_num_threads()))
    utts = utterances()[:N_LOSS]
    ids = [u["id"] for u in utts]
    texts = [transcript(u["text"]) for u in utts]
    mels = torch.stack([whisper.log_mel_spectrogram(whisper.pad_or_trim(u["audio"]), n_mels=80) for u in utts])
    old = torch.load(OUT / "en" / "loss.pt", weights_only=True)
    loss = loss_reference(OUT / "en" / "hf", get_tokenizer(load_openai(OUT / "en" / "openai.pt")), mels, ids, texts)
    assert torch.equal(old["loss_tensor"], loss["loss_tensor"]), "float32 loss changed"
    assert all(torch.equal(old["grads"][k], loss["grads"][k]) for k in old["grads"]), "float32 gradients changed"
    torch.save(loss, OUT / "en" / "loss.pt")
    decode_json = json.loads((OUT / "decode.json").read_text())
    write_readme(summarize(decode_json), decode_json["checks"])
    print(f"en: loss.pt: float32 loss {loss['loss']:.9f}, float64 {float(loss['float64']['loss_tensor']):.12f}")


if __name__ == "__main__":
    loss_only() if sys.argv[1:] == ["--loss-only"] else main()
