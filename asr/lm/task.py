"""What the training loop needs to know about a language model (see ``asr.training.task`` for the contract).

Batches are token sequences bucketed by length through the ASR's own sampler: a sentence of n ids
is handed to it as n + 1 "frames" (its predicted tokens, eos included), so ``data.max_tokens`` is the
padded-token budget of a batch exactly as ``data.max_frames`` is the ASR's. Losses are normalised
per predicted token; validation is the dev loss per token, its perplexity and token accuracy.
There is no CMVN and no augmentation.
"""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path

import torch

from asr.checkpoint import CONFIG_FILE
from asr.config import ConfigError
from asr.data.pipeline import make_loader
from asr.data.sampler import FRAME_SHIFT_S, DynamicBucketSampler
from asr.hardware import autocast
from asr.lm.config import LMExperimentConfig, save_lm_config
from asr.lm.data import TextDataset, collate_text, encode_texts
from asr.lm.directory import save_lm_dir
from asr.lm.model import LMLoss, build_lm
from asr.text import TOKENIZER_FILE, Tokenizer
from asr.training.checkpoints import SHAPE_KEYS
from asr.training.runtime import DistEnv, all_reduce

__all__ = ["LMTask"]

log = logging.getLogger(__name__)


class LMTask:
    rate_key = "tokens_per_s"

    def __init__(self, cfg: LMExperimentConfig):
        self.cfg = cfg

    def check_resume(self, saved_config: dict, exp: Path) -> None:
        saved = saved_config.get("lm")
        if saved is None:
            raise ConfigError(f"{exp}: its checkpoints are not an LM's; use another --out")
        for k, v in saved.items():
            now = getattr(self.cfg.lm, k)
            if (k == "vocab_size" and now == 0) or now == v:
                continue
            if k in (*SHAPE_KEYS, "type", "layers", "tie_output", "embed_dim", "positions", "layer_norm_eps"):
                raise ConfigError(f"lm.{k}: {exp} was trained with {v!r}, the config now says {now!r}; "
                                  "use another --out for a different model")  # fmt: skip
            log.warning("lm.%s changed from %r to %r since the checkpoint", k, v, now)

    def build_model(self, exp: Path, device: torch.device) -> torch.nn.Module:
        cfg = self.cfg
        if not cfg.data.tokenizer and not (exp / TOKENIZER_FILE).is_file():
            raise ConfigError("data.tokenizer: an LM needs the ASR model's tokenizer (a directory or .model file)")
        self.tokenizer = tok = Tokenizer.load(cfg.data.tokenizer or exp)
        if cfg.lm.vocab_size not in (0, tok.vocab_size):
            raise ConfigError(f"lm.vocab_size: {cfg.lm.vocab_size}, but the tokenizer {tok.model_path} has "
                              f"{tok.vocab_size} ids; leave it 0 to take the tokenizer's")  # fmt: skip
        cfg.lm.vocab_size = tok.vocab_size
        return LMLoss(build_lm(cfg.lm)).to(device)

    def build_data(self, model):
        d = self.cfg.data
        if not d.train:
            raise ConfigError("data.train: expected text files or manifests to train the LM on, got nothing")
        train = encode_texts(d.train, self.tokenizer, d.normalizer, d.max_length)
        if not train:
            raise ValueError(f"{', '.join(d.train)}: no sentences left after normalisation and filtering")
        self.train_tokens = sum(len(s) + 1 for s in train)
        self.train_sentences = len(train)
        dev = None
        if d.dev:
            sents = encode_texts(d.dev, self.tokenizer, d.normalizer, d.max_length)
            if not sents:
                raise ValueError(f"{', '.join(d.dev)}: no dev sentences left after normalisation and filtering")
            dev = (TextDataset(sents), self._lengths(sents))
        return TextDataset(train), self._lengths(train), dev

    @staticmethod
    def _lengths(sentences) -> list[float]:
        return [(len(s) + 1) * FRAME_SHIFT_S for s in sentences]  # n + 1 predicted tokens as sampler "frames"

    def write_files(self, exp: Path) -> None:
        save_lm_config(self.cfg, exp / CONFIG_FILE)
        tok = self.tokenizer.model_path
        if Path(tok).resolve() != (exp / TOKENIZER_FILE).resolve():
            shutil.copyfile(tok, exp / TOKENIZER_FILE)

    def load_files(self, exp: Path, model) -> None:
        pass

    def sampler(self, lengths: list[float], env: DistEnv, shuffle: bool):
        d = self.cfg.data
        return DynamicBucketSampler(lengths, d.max_tokens, d.max_sentences, d.num_buckets, seed=self.cfg.train.seed,
                                    rank=env.rank, world_size=env.world_size, shuffle=shuffle)  # fmt: skip

    def loader(self, dataset, sampler, epoch: int, device: torch.device):
        return make_loader(dataset, sampler, self.cfg, epoch, device, collate_text)

    def units(self, batch) -> int:
        return int(batch.token_lens.sum()) + len(batch)  # predicted tokens: each sentence's ids and its eos

    def amount(self, batch) -> float:
        return float(self.units(batch))

    def inputs(self, batch, device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        batch = batch.to(device, non_blocking=True)
        return batch.tokens, batch.token_lens

    def dummy_inputs(self, model, device: torch.device):
        return torch.ones(1, 1, dtype=torch.long, device=device), torch.ones(1, dtype=torch.long, device=device)

    @torch.no_grad()
    def validate(self, model, loader, env: DistEnv, precision: str) -> dict[str, float]:
        """Dev loss per predicted token, its perplexity, token accuracy; summed over ranks."""
        model.eval()
        nll = tokens = correct = 0.0
        for batch in loader:
            if len(batch) == 0:
                continue
            with autocast(precision, env.device):
                out = model(*self.inputs(batch, env.device, None))
            nll += float(out["nll"])
            tokens += float(out["num_tokens"])
            correct += float(out["acc"]) * float(out["num_tokens"])
        nll, tokens, correct = all_reduce([nll, tokens, correct], env)
        model.train()
        loss = nll / max(tokens, 1)
        return {"dev_loss": loss, "dev_ppl": math.exp(min(loss, 700)), "dev_acc": correct / max(tokens, 1)}

    def save_model_dir(self, exp: Path, state_dict: dict[str, torch.Tensor]) -> None:
        save_lm_dir(exp, self.cfg, {k.removeprefix("lm."): v for k, v in state_dict.items()})

    def describe(self, model, sampler) -> str:
        return (f"LM ({self.cfg.lm.type}) {model.num_parameters():,} parameters, {self.train_sentences} train "
                f"sentences ({self.train_tokens:,} tokens), {len(sampler)} batches/epoch/rank "
                f"({100 * sampler.padding_ratio():.1f}% padding)")  # fmt: skip
