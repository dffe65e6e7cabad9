"""Corpus preparation: downloads (checked, resumable), LibriSpeech, Kaldi data directories and the
Free Spoken Digit Dataset (with its espeak-ng voices), each written as JSON Lines manifests
(:mod:`asr.data.manifest`) that the generic data pipeline reads."""
