"""Typed YAML for the configuration dataclasses: read a file, build a dataclass checking every value
by name (unknown keys, wrong types), apply ``--set section.key=value`` overrides, write it back.

``asr.config`` (the ASR experiment) and ``asr.lm.config`` (the LM experiment) declare their
dataclasses; this module is the machinery they share.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import types
import typing
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ConfigError", "from_dict", "apply_overrides", "read_config_file", "build_config", "save_config"]

log = logging.getLogger("asr.config")  # messages about config keys come from asr.config, as before


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp`` (ints widen to floats); return the typed value."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_dict(tp, value, key)
    if origin is list:
        (inner,) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_convert(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config annotation {tp} for {key}")


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys and wrong types by name."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    aliases = getattr(cls, "ALIASES", {})
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if k in aliases:
            new = f"{prefix}.{aliases[k]}" if prefix else aliases[k]
            if aliases[k] in data:
                raise ConfigError(f"{key}: the old name of {new}; give only one of them")
            log.warning("%s is the old name of %s (it is a bonus per token): read as %s", key, new, new)
            k = aliases[k]
        if k not in names:
            raise ConfigError(f"{key}: unknown key (known: {', '.join(sorted(names))})")
        kwargs[k] = _convert(v, hints[k], key)
    return cls(**kwargs)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` strings (values parsed as YAML) to a nested mapping, in place."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. train.lr=0.001")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        node = data
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {p} is not a section")
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({e})") from e
    return data


def read_config_file(path: str | os.PathLike, sections: str) -> dict[str, Any]:
    """The top-level mapping of a YAML config file (``sections``: what it should hold, for the error)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping with sections {sections}")
    return data


def build_config(cls: type, data: dict[str, Any], path: str | os.PathLike | None = None):
    """``cls`` (a config dataclass with ``validate``) from a mapping, validated; errors name ``path``."""
    try:
        return from_dict(cls, data).validate()
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path else str(e)) from None


def save_config(cfg, path: str | os.PathLike) -> None:
    """Write a resolved configuration (anything with ``to_dict``) as YAML, atomically."""
    from asr.atomic import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
