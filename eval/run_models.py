"""The models of a run, assembled in one place for the training, the evaluation watcher and
``python -m eval``: the chat adapter of the run's family, the base, and each model evaluated as a
predictor (``eval.predictor``), in this process or behind a model server (``eval.server``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from core.errors import ConfigError
from core.media import FrameCache
from core.run import Run
from eval.predictor import InProcess, Predictor
from models.chat import VideoChatAdapter, make_adapter
from models.loading import CheckpointModels, is_adapter, load_base, load_model, load_processor
from models.served import served_weights, serving


class RunModels:
    """A run's models: its chat adapter, its base (loaded when first needed, as the run loads it: in 4 bits
    for a QLoRA run) and each checkpoint on it.

    Args:
        run: the resolved run.
        cache: the frame cache the chat adapter reads frames from.
        device: where an evaluated model goes (None: where it loads; the Trainer places a training's).
        serve: evaluate through a model server (``eval.server``) instead of in process.
    """

    def __init__(self, run: Run, cache: FrameCache, *, device: str | None, serve: bool):
        self.run, self.device, self.serve = run, device, serve
        cfg = run.cfg
        self.processor = load_processor(cfg.model)
        self.chat: VideoChatAdapter = make_adapter(
            cfg.model.family, self.processor, cfg.media, cache, cfg.model.chat_format
        )
        self._base = None
        self._checkpoints: CheckpointModels | None = None

    @property
    def base(self):
        """The run's base model (loaded on first use)."""
        if self._base is None:
            self._base, self.processor = load_base(
                self.run.cfg.model, quantized=self.run.quantized, device=self.device
            )
        return self._base

    def of(self, model) -> Predictor:
        """A model of this process (the training's, as it trains) as a predictor."""
        return InProcess(model, self.chat)

    @contextmanager
    def predictor(self, checkpoint: Path | None = None) -> Iterator[Predictor]:
        """The predictor of a checkpoint of the run (None: the base) for the block: in process
        (:meth:`model`), or served for the block (a LoRA checkpoint merged into its base first)."""
        if self.serve:
            root = self.run.dir.served_weights_dir
            weights = served_weights(self.run.cfg.model, checkpoint, self.processor, root)
            with serving(self.run.cfg, weights, self.chat, self.run.dir) as served:
                yield served
            return
        yield self.of(self.model(checkpoint))

    def model(self, checkpoint: Path | None = None):
        """The model of a checkpoint of the run (None: the base) in this process: a LoRA checkpoint's adapter
        swapped onto the one base, a full checkpoint loaded whole, without the base."""
        if checkpoint is None:
            return self.base
        if self._base is None and not is_adapter(checkpoint):  # a full checkpoint loads on its own
            model, _ = load_model(replace(self.run.cfg.model, name_or_path=str(checkpoint), tiny=False))
            return model.to(self.device) if self.device else model
        if self._checkpoints is None:
            self._checkpoints = CheckpointModels(self.base, self.run.cfg.model, self.device or "cpu")
        return self._checkpoints.load(checkpoint)


def open_models(
    run: Run, cache: FrameCache, *, device: str | None = None, serve: bool | None = None
) -> RunModels:
    """The run's models; ``serve`` defaults to whether the run evaluates through a server (a training
    passes False: it trains its own model in process).

    Raises:
        ConfigError: a checkpoint to serve with only a running server's ``base_url`` (it serves one model).
    """
    serve = run.cfg.eval.server.enabled if serve is None else serve
    if serve and run.checkpoint is not None and not run.cfg.eval.server.command:
        raise ConfigError(
            "checkpoint= with eval.server.endpoint.base_url: a running server serves one fixed model; "
            "give eval.server.command so that the checkpoint is served for its evaluation"
        )
    return RunModels(run, cache, device=device, serve=serve)
