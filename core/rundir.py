"""The run directory: the one place that names its files and knows their protocol.

A training run and its evaluation (inline, by the watcher, or by ``python -m eval``) share a directory::

    <run_dir>/resolved_config.yaml    the run's whole config, typed (rewritten at every start or resume)
    <run_dir>/.hydra/config.yaml      the config Hydra composed (``python -m train``, ``eval``, ``demo``)
    <run_dir>/checkpoints/checkpoint-N/   saves, N the training step
    <run_dir>/final/                  the last weights
    <run_dir>/final/README.md         their model card in the Hub's format (train/model_card.py)
    <run_dir>/training_done           written last by the training: the watcher may stop
    <run_dir>/quarantine_<name>.json  items left out because their media could not be decoded
    <run_dir>/eval/models.json        (name, step) of every model evaluated, the baseline first
    <run_dir>/eval/<model>/<benchmark>.jsonl   per-item predictions, appended as they are made
    <run_dir>/eval/<model>/settings.json       what they were made under, per benchmark
    <run_dir>/eval/judge_cache.jsonl  the judge's judgements (``judge.cache``'s default)
    <run_dir>/summary.json, report.md the comparison of every model with the baseline
    <run_dir>/<figure>.png            the benchmarks' plots beside the report (``ovi_radar.png``)
    <run_dir>/viewer.html             the results viewer: one page of every item (eval/viewer.py)
    <run_dir>/response_tables.json    the tables of a scored response file (``python -m eval score_file=``)
    <run_dir>/metrics.jsonl           every scalar logged (core/metric_logging.py)
    <run_dir>/wandb/                  the W&B run; ``wandb/run_id`` its id, shared with the watcher
    <run_dir>/parameters.json         per tower: its parameters, how many train, at which learning rate
    <run_dir>/deepspeed.json          the DeepSpeed config, as given before the Trainer fills it in
    <run_dir>/plan.json, plan.md      the run planned at its released size (``plan=true``, train/plan.py)
    <run_dir>/launch.sbatch           the SLURM script ``python -m launch`` submitted
    <run_dir>/data_mix.json           per training dataset: weight, share, samples drawn and used
    <run_dir>/start_model/            a post-SFT stage's starting model: the SFT adapter merged into its base
    <run_dir>/eval/served_weights/<checkpoint>/   a checkpoint as a server loads it (a LoRA one merged)
    <run_dir>/eval/served_clips/      video clips cut for a server (served evaluation and GRPO's rollouts)
    <run_dir>/eval/server.log         the log of the server a served evaluation launched
    <run_dir>/rollout_weights/step-N/ GRPO's policy at step N, as its rollout server loads it (the last kept)
    <run_dir>/rollout_server.log      the log of the server GRPO's served rollouts launched
    <run_dir>/grpo_judge_cache.jsonl  the judgements of GRPO's judge reward (``stage.grpo.judge.cache``)

A demo's directory (``python -m demo``) holds, beside ``.hydra/``, what the demo saved: ``demo.out_dir``,
laid out by demo/saving.py as the benchmarks' releases.

Every file written here in one piece is written whole (under a temporary name, then renamed); the results
files, the judges' caches and ``metrics.jsonl`` are appended to (:class:`core.files.JsonlStore`), and the
servers' logs grow as the servers write them.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core.config import TrainConfig
from core.errors import DataError
from core.files import write_json_atomic, write_text_atomic

# core.distributed imports torch: it is imported where ranks are told apart, so that ``launch`` (which never
# imports torch) names a run's files here too.

BASELINE = "baseline"  # the model name of the untuned model, evaluated before step 1
_CHECKPOINT_PREFIX = "checkpoint-"


class RunDir:
    """The files of one run directory.

    Args:
        path: the directory (``<output_root>/<run_name>``); it need not exist yet.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # -- the resolved config -------------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        return self.path / "resolved_config.yaml"

    def write_config(self, cfg: TrainConfig) -> None:
        """Record the run's config (atomically: the watcher may read it the moment it appears)."""
        write_text_atomic(self.config_file, OmegaConf.to_yaml(OmegaConf.structured(cfg)))

    @property
    def composed_config_file(self) -> Path:
        """The config Hydra composed for the command that made the run (``hydra.output_subdir``); a
        standalone evaluation has no resolved config, only this."""
        return self.path / ".hydra" / "config.yaml"

    def read_config(self) -> TrainConfig:
        """The run's config as the training resolved it, typed.

        Raises:
            DataError: the file is missing or does not fit the training config schema.
        """
        if not self.config_file.exists():
            raise DataError(str(self.config_file), "not found: is this a training run directory?")
        try:
            text = OmegaConf.create(self.config_file.read_text())
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), text))
        except OmegaConfBaseException as err:
            message = f"not a training config: {str(err).splitlines()[0]}"
            raise DataError(str(self.config_file), message) from None

    # -- checkpoints ---------------------------------------------------------------------------------

    @property
    def checkpoints_dir(self) -> Path:
        """Where the Trainer saves (its ``output_dir``)."""
        return self.path / "checkpoints"

    @property
    def final_dir(self) -> Path:
        return self.path / "final"

    @property
    def model_card_file(self) -> Path:
        """The final weights' model card: base model, data, recipe and evaluation deltas, for the Hub."""
        return self.final_dir / "README.md"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints_dir / checkpoint_name(step)

    def checkpoints(self) -> list[Path]:
        """The checkpoints whose save finished, in step order."""
        if not self.checkpoints_dir.is_dir():
            return []
        found = [p for p in self.checkpoints_dir.iterdir() if checkpoint_step(p) is not None]
        return sorted((p for p in found if checkpoint_is_complete(p)), key=checkpoint_step)

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint, to resume from (None for a fresh run)."""
        complete = self.checkpoints()
        return complete[-1] if complete else None

    # -- the training's end --------------------------------------------------------------------------

    @property
    def done_file(self) -> Path:
        return self.path / "training_done"

    def mark_done(self) -> None:
        """Tell the evaluation watcher that every checkpoint is saved and the training wrote its last file
        (rank 0 writes; call it last)."""
        from core import distributed

        if distributed.is_main():
            write_text_atomic(self.done_file, "done\n")

    def is_done(self) -> bool:
        """Whether the training is done: its marker is newer than the resolved config, which every start
        (and resume) of the training rewrites, so a marker left by an earlier run does not count."""
        try:
            return self.done_file.stat().st_mtime_ns >= self.config_file.stat().st_mtime_ns
        except FileNotFoundError:
            return False

    # -- quarantine ----------------------------------------------------------------------------------

    def quarantine_file(self, name: str) -> Path:
        """``name``: ``train``, or ``eval_<benchmark>``."""
        return self.path / f"quarantine_{name}.json"

    def write_quarantine(self, name: str, entries: list[dict]) -> None:
        """List the items left out (``{"id", "file", "reason"}`` each); rank 0 writes."""
        from core import distributed

        if distributed.is_main():
            write_json_atomic(self.quarantine_file(name), entries, indent=2)

    def quarantine_counts(self) -> dict[str, dict[str, int]]:
        """Items left out per quarantine file (``train``, and each benchmark by name), by reason."""
        counts = {}
        for path in sorted(self.path.glob("quarantine_*.json")):
            name = path.stem.removeprefix("quarantine_").removeprefix("eval_")
            counts[name] = reason_counts(json.loads(path.read_text()))
        return counts

    # -- evaluation ----------------------------------------------------------------------------------

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    def results_file(self, model: str, benchmark: str) -> Path:
        """The per-item predictions of one model on one benchmark."""
        return self.eval_dir / model / f"{benchmark}.jsonl"

    def settings_file(self, model: str) -> Path:
        """What a model's predictions were made under, per benchmark (``eval compare`` checks them)."""
        return self.eval_dir / model / "settings.json"

    @property
    def models_file(self) -> Path:
        return self.eval_dir / "models.json"

    def models(self) -> list[tuple[str, int]]:
        """``(name, step)`` of every model evaluated here, in order; the baseline first."""
        if not self.models_file.exists():
            return []
        return [(name, int(step)) for name, step in json.loads(self.models_file.read_text())]

    def add_model(self, name: str, step: int) -> None:
        """Record an evaluated model (kept on disk: a resumed training or watcher still reports it)."""
        models = self.models()
        if (name, step) not in models:
            write_text_atomic(self.models_file, json.dumps([*models, (name, step)]))

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    @property
    def report_file(self) -> Path:
        return self.path / "report.md"

    def figure_file(self, name: str) -> Path:
        """A benchmark's plot beside the report, by its file name (``ovi_radar.png``)."""
        return self.path / name

    def figure_files(self) -> list[Path]:
        """Every plot beside the report (PNG), by name."""
        return sorted(self.path.glob("*.png"))

    @property
    def viewer_file(self) -> Path:
        """The results viewer's page (eval/viewer.py), written beside the report."""
        return self.path / "viewer.html"

    @property
    def judge_cache_file(self) -> Path:
        """The evaluation judge's judgements (``judge.cache`` points here unless set)."""
        return self.eval_dir / "judge_cache.jsonl"

    @property
    def response_tables_file(self) -> Path:
        """The tables of a response file scored by ``python -m eval score_file=...``."""
        return self.path / "response_tables.json"

    # -- served models -------------------------------------------------------------------------------

    @property
    def served_clips_dir(self) -> Path:
        """Video clips cut for a model server (served evaluation and GRPO's served rollouts alike)."""
        return self.eval_dir / "served_clips"

    @property
    def server_log_file(self) -> Path:
        """The output of the server a served evaluation launched."""
        return self.eval_dir / "server.log"

    @property
    def rollout_weights_dir(self) -> Path:
        """Where GRPO writes the policy for its rollout server, one directory per step."""
        return self.path / "rollout_weights"

    def rollout_weights(self, step: int) -> Path:
        """The policy at training step ``step``, as GRPO's rollout server loads it."""
        return self.rollout_weights_dir / f"step-{step}"

    @property
    def rollout_server_log_file(self) -> Path:
        """The output of the server GRPO's served rollouts launched."""
        return self.path / "rollout_server.log"

    @property
    def grpo_judge_cache_file(self) -> Path:
        """The judgements of GRPO's judge reward (``stage.grpo.judge.cache`` points here unless set)."""
        return self.path / "grpo_judge_cache.jsonl"

    # -- metrics -------------------------------------------------------------------------------------

    @property
    def metrics_file(self) -> Path:
        """Every scalar logged, one JSON line each (core/metric_logging.py)."""
        return self.path / "metrics.jsonl"

    @property
    def wandb_dir(self) -> Path:
        """The W&B run's files (W&B names what is inside, but for :attr:`wandb_id_file`)."""
        return self.path / "wandb"

    @property
    def wandb_id_file(self) -> Path:
        """The W&B run's id, so that a resumed run and its watcher log into the same W&B run."""
        return self.wandb_dir / "run_id"

    # -- training records ----------------------------------------------------------------------------

    @property
    def parameters_file(self) -> Path:
        return self.path / "parameters.json"

    @property
    def plan_file(self) -> Path:
        return self.path / "plan.json"

    @property
    def plan_report_file(self) -> Path:
        return self.path / "plan.md"

    @property
    def launch_script_file(self) -> Path:
        """The SLURM script ``python -m launch`` wrote and submitted."""
        return self.path / "launch.sbatch"

    @property
    def deepspeed_file(self) -> Path:
        return self.path / "deepspeed.json"

    @property
    def start_model_dir(self) -> Path:
        """A post-SFT stage's starting model, when it starts from a LoRA checkpoint (merged once)."""
        return self.path / "start_model"

    @property
    def served_weights_dir(self) -> Path:
        """Where each checkpoint served for evaluation is written as a server loads it."""
        return self.eval_dir / "served_weights"

    @property
    def data_mix_file(self) -> Path:
        """How ``data.train`` was mixed: per dataset its weight, share, and samples drawn and used."""
        return self.path / "data_mix.json"


def checkpoint_name(step: int) -> str:
    return f"{_CHECKPOINT_PREFIX}{step}"


def checkpoint_step(checkpoint: str | Path) -> int | None:
    """The step of ``checkpoint-N`` (a path or a name); None for anything else."""
    number = Path(checkpoint).name.removeprefix(_CHECKPOINT_PREFIX)
    if number == Path(checkpoint).name or not number.isdigit():
        return None
    return int(number)


def checkpoint_is_complete(checkpoint: Path) -> bool:
    """Whether a save finished, so that a resumed run can read every file in it.

    Rank 0 writes ``trainer_state.json`` last, and not atomically: a kill mid-write leaves one that does
    not parse. Other ranks may still be writing after it: each its ``rng_state_<rank>.pth``.
    ``torch.save`` writes a zip whose directory comes last, so a file cut short does not open as one.
    Every rank decides alike: the files are the same for all.
    """
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
        for torch_file in [*checkpoint.glob("*.pt"), *checkpoint.glob("*.pth")]:
            zipfile.ZipFile(torch_file).close()
    except (OSError, ValueError, zipfile.BadZipFile):
        return False
    from core import distributed

    per_rank_rng = list(checkpoint.glob("rng_state_*.pth"))
    if not per_rank_rng:
        return True
    # One optimizer shard per data-parallel rank under ZeRO, all written before a barrier that precedes
    # the RNG files; without ZeRO, the ranks are those of the run that asks.
    zero_shards = list(checkpoint.glob("global_step*/*zero_pp_rank_*_optim_states.pt"))
    return len(per_rank_rng) >= (len(zero_shards) or distributed.world_size())


def reason_counts(entries: list[dict]) -> dict[str, int]:
    """Quarantined items counted by the first words of their reason."""
    return dict(Counter(entry["reason"].split(":")[0] for entry in entries))
