"""The benchmarks evaluation knows, by name, and their settings. A new benchmark is one new file here and
one entry below (its settings dataclass comes with it: ``eval.settings.<name>``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core.config import EvalConfig
from core.errors import ConfigError
from eval.benchmarks.base import Benchmark, NoSettings, Settings
from eval.benchmarks.diagnostics import V2P_BLIND, V2P_SHUFFLED, V2P_TEXT_PROMPT, V2P_Z
from eval.benchmarks.ovi import OVI
from eval.benchmarks.ovi_pairs import OVI_PAIRS
from eval.benchmarks.skills import SKILLS
from eval.benchmarks.v2p import V2P

BENCHMARKS: dict[str, Benchmark] = {
    "v2p": V2P,
    "ovi": OVI,
    "ovi_pairs": OVI_PAIRS,
    # The V2P-Bench hack diagnostics, derived from the V2P items (each needs v2p evaluated too).
    "v2p_blind": V2P_BLIND,
    "v2p_z": V2P_Z,
    "v2p_shuffled": V2P_SHUFFLED,
    "v2p_text_prompt": V2P_TEXT_PROMPT,
    # Not a paper's: the stand-in base model's held-out generic questions (+exp=standin).
    "skills": SKILLS,
}


def settings_schemas() -> dict[str, type]:
    """Each benchmark's settings dataclass, for the config schema (``core.config.register_configs``)."""
    return {name: bench.settings_class for name, bench in BENCHMARKS.items() if bench.settings_class}


def resolve_settings(cfg: EvalConfig, synthetic: dict[str, str] | None = None) -> EvalConfig:
    """``cfg`` with ``settings`` typed, one entry per benchmark it evaluates or derives from (composed
    values, plain dicts from a config file, or instances; defaults for the rest), and each unset ``root``
    set to the synthetic dataset its benchmark names (``synthetic``: dataset -> directory).

    Raises:
        ConfigError: an unknown benchmark, a derived one without its source, or a bad setting.
    """
    unknown = [name for name in [*cfg.benchmarks, *cfg.settings] if name not in BENCHMARKS]
    if unknown:
        raise ConfigError(
            f"eval.benchmarks / eval.settings: unknown {unknown} (known: {', '.join(BENCHMARKS)})"
        )
    for name in cfg.benchmarks:
        source = BENCHMARKS[name].source
        if source is not None and source not in cfg.benchmarks:
            raise ConfigError(f"eval.benchmarks: {name} is made from {source}'s items: add {source}")
    typed = {}
    for name in cfg.benchmarks:
        bench = BENCHMARKS[name]
        if bench.source is None:
            typed[name] = _typed(bench, cfg.settings.get(name), (synthetic or {}).get(bench.synthetic or ""))
    return replace(cfg, settings=typed)


def settings_of(bench: Benchmark, cfg: EvalConfig) -> Settings:
    """The settings a benchmark runs under: its own, or its source's for a derived benchmark (``cfg`` as
    :func:`resolve_settings` returned it)."""
    return cfg.settings[bench.source or bench.name]


def _typed(bench: Benchmark, given: Any, synthetic_root: str | None) -> Settings:
    schema = bench.settings_class or NoSettings
    if isinstance(given, schema):
        settings = given
    else:
        try:
            node = OmegaConf.merge(OmegaConf.structured(schema), given or {})
            settings = OmegaConf.to_object(node)
        except OmegaConfBaseException as err:
            raise ConfigError(f"eval.settings.{bench.name}: {str(err).splitlines()[0]}") from None
    if synthetic_root and getattr(settings, "root", "") is None:
        settings = replace(settings, root=synthetic_root)
    return settings
