"""What the training loop needs to know about speech: the ASR task.

``asr.training.train.Trainer`` runs one loop (DDP, mixed precision, accumulation, exact resume, checkpoints)
for any model; a task object supplies the parts that depend on what is learnt. :class:`ASRTask` is
the speech recogniser's (tokenizer and model, filtered manifests, CMVN, SpecAugment and friends,
dev loss/accuracy/WER, the model directory); ``asr.lm.task.LMTask`` is the language model's. A task
has these methods and attributes, and nothing else is asked of it:

    check_resume(saved_config, exp)   refuse a checkpoint of another architecture
    build_model(exp, device)          the network (the loop seeds the RNG just before)
    build_data(model)                 (train dataset, train lengths in seconds, dev or None);
                                      dev = (dataset, lengths); lengths feed the bucketing sampler
    write_files(exp) / load_files(exp, model)   rank 0 writes the run's files; every rank reads
    sampler(lengths, env, shuffle) / loader(dataset, sampler, epoch, device)
    units(batch)                      what losses are normalised by (utterances, tokens)
    amount(batch)                     what the progress rate counts (audio seconds, tokens)
    inputs(batch, device, gen)        the model's positional arguments (augmented for training)
    dummy_inputs(model, device)       one tiny batch for a rank whose micro-batch is empty (DDP)
    validate(model, loader, env, precision) -> metrics
    save_model_dir(exp, state_dict)   refresh the model directory at each epoch end
    describe(model, sampler)          one log line about the model and the data
    rate_key                          the metrics-log key of the progress rate
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch

from asr.checkpoint import CMVN_FILE, CONFIG_FILE, init_files, save_model_dir, tokenizer_file_name
from asr.config import Config, ConfigError, save_config
from asr.data.dataset import collate
from asr.data.pipeline import build_data, compute_cmvn, dummy_batch, make_loader, make_sampler
from asr.training.checkpoints import check_same_model
from asr.training.runtime import DistEnv

__all__ = ["ASRTask"]

log = logging.getLogger(__name__)


class ASRTask:
    """The speech recogniser: fbank batches in, joint CTC/attention loss out."""

    rate_key = "audio_s_per_s"

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def check_resume(self, saved_config: dict, exp: Path) -> None:
        check_same_model(saved_config["model"], self.cfg, exp)

    def build_model(self, exp: Path, device: torch.device) -> torch.nn.Module:
        from asr.model import ASRModel
        from asr.text import Tokenizer

        cfg = self.cfg
        if cfg.data.features == "whisper":  # a Whisper model's byte-level BPE (tokenizer.json)
            from asr.whisper_text import WhisperTokenizer

            if not cfg.model.vocab_size:
                raise ConfigError("model.vocab_size: a Whisper model's (51864 English-only, 51865 or 51866)")
            tokenizer = WhisperTokenizer.for_model(cfg.data.tokenizer or exp, cfg.model.vocab_size, "model.vocab_size")
        else:
            tokenizer = Tokenizer.load(cfg.data.tokenizer or exp)
        self.tokenizer = tokenizer
        if cfg.model.vocab_size not in (0, tokenizer.vocab_size):
            raise ConfigError(
                f"model.vocab_size: {cfg.model.vocab_size}, but the tokenizer {tokenizer.model_path} has "
                f"{tokenizer.vocab_size} ids; leave it 0 to take the tokenizer's"
            )
        cfg.model.vocab_size = tokenizer.vocab_size
        return ASRModel(cfg.model).to(device)

    def build_data(self, model):
        data = build_data(self.cfg, self.tokenizer, model)
        self.train_records, train_ds = data["train"]
        # Speed perturbation lengthens audio by up to 1/min(factor): batches are budgeted for the longest case.
        sp = self.cfg.data.speed_perturb
        stretch = 1.0 / min(sp) if sp else 1.0
        lengths = [r["duration"] * stretch for r in self.train_records]
        dev = None
        if data["dev"] is not None:
            dev_records, dev_ds = data["dev"]
            self.dev_by_id = {r["id"]: r for r in dev_records}
            dev = (dev_ds, [r["duration"] for r in dev_records])
        return train_ds, lengths, dev

    def write_files(self, exp: Path) -> None:
        from asr.data.cmvn import CMVNStats

        save_config(self.cfg, exp / CONFIG_FILE)
        tok = self.tokenizer.model_path
        dest = exp / tokenizer_file_name(tok)
        if Path(tok).resolve() != dest.resolve():
            shutil.copyfile(tok, dest)
        if not (exp / CMVN_FILE).is_file():
            cfg = self.cfg
            init_cmvn = init_files(cfg.train.init)[1] if cfg.train.init else None  # fine-tuning keeps its CMVN
            if cfg.data.cmvn or init_cmvn:
                stats = CMVNStats.load(cfg.data.cmvn or init_cmvn)
            else:
                stats = compute_cmvn(self.train_records, cfg)
            stats.save(exp / CMVN_FILE)

    def load_files(self, exp: Path, model) -> None:
        from asr.data.cmvn import CMVNStats

        model.cmvn.load_stats(*CMVNStats.load(exp / CMVN_FILE).mean_istd())

    def sampler(self, lengths: list[float], env: DistEnv, shuffle: bool):
        return make_sampler(lengths, self.cfg, env, shuffle)

    def loader(self, dataset, sampler, epoch: int, device: torch.device):
        return make_loader(dataset, sampler, self.cfg, epoch, device, collate)

    def units(self, batch) -> int:
        return batch.feats.shape[0]

    def amount(self, batch) -> float:
        return sum(batch.durations)

    def inputs(self, batch, device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        """The batch on the device, with the training augmentations that act on whole batches."""
        from asr.data.augment import augment

        batch = batch.to(device, non_blocking=True)
        feats, feat_lens = augment(batch.feats, batch.feat_lens, self.cfg.data, gen)
        return feats, feat_lens, batch.tokens, batch.token_lens

    def dummy_inputs(self, model, device: torch.device):
        return dummy_batch(model, device)

    def validate(self, model, loader, env: DistEnv, precision: str) -> dict[str, float]:
        from asr.training.validate import validate

        return validate(model, loader, self.dev_by_id, self.tokenizer, self.cfg, env, precision)

    def save_model_dir(self, exp: Path, state_dict: dict[str, torch.Tensor]) -> None:
        save_model_dir(exp, self.cfg, state_dict)

    def describe(self, model, sampler) -> str:
        recs = self.train_records
        return (f"model {model.num_parameters():,} parameters, {len(recs)} train utterances "
                f"({sum(r['duration'] for r in recs) / 3600:.1f} h), {len(sampler)} batches/epoch/rank "
                f"({100 * sampler.padding_ratio():.1f}% padding)")  # fmt: skip
