"""The typed config of ``python -m demo`` (``conf/demo.yaml``): the run's model and media, the checkpoint
to load, and ``demo.*``."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from hydra.core.config_store import ConfigStore

from core.config import EvalRunConfig, RunConfig
from models.ovi_simulation import DEFAULT_TOKENS_PER_SECOND


@dataclass
class DemoSettings:
    """``demo.*``: where the page is served, what it starts with, how long answers may be."""

    host: str = "127.0.0.1"  # loopback only: the demo has no authentication
    port: int = 7860  # 0: any free port (printed)
    video: str | None = None  # a video to start with (the page can load another)
    out_dir: str = "${run_dir}"  # saved items: <out_dir>/ovibench/, <out_dir>/v2p/; uploaded videos
    max_new_tokens: int = 64  # the answer's length limit
    max_new_tokens_reaction: int = 128  # the reaction's, as OVIBench's open-ended items
    # Saved OVIBench items place the interruption at the answer token it came after, at this speaking
    # rate (the simulation's), so that `python -m eval` cuts the replayed answer at the same token.
    tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND
    max_frames: int = 600  # frames kept for scrubbing (a longer video is sampled evenly)
    token_delay_s: float = 0.0  # a pause after each streamed token (a tiny model answers too fast to watch)


@dataclass
class DemoConfig(RunConfig):
    """A model (``model=``) or a training checkpoint (``checkpoint=``), as ``python -m eval`` loads it."""

    # A training checkpoint (<run_dir>/checkpoints/checkpoint-N, LoRA or full), on its run's base and media.
    checkpoint: str | None = None
    demo: DemoSettings = field(default_factory=DemoSettings)
    run_name: str = "demo"

    def as_evaluation(self) -> EvalRunConfig:
        """The evaluation of the same model (``python -m eval checkpoint=…``), which the demo's run is
        resolved as: the model loads as the evaluation loads it."""
        run = {f.name: getattr(self, f.name) for f in fields(RunConfig)}
        return EvalRunConfig(**run, checkpoint=self.checkpoint)


def register_demo_config() -> None:
    """Register ``demo_schema``, which ``conf/demo.yaml`` extends (the demo evaluates nothing: its
    ``eval.settings`` stay untyped)."""
    ConfigStore.instance().store(name="demo_schema", node=DemoConfig)
