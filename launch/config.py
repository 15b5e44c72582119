"""Typed launcher configs and the composition of a launch: which launcher, which run, which overrides.

``conf/launch.yaml`` holds only the ``launcher`` group, typed by :class:`LauncherConfig`. The training
config is composed separately from ``conf/train.yaml`` with the user's other overrides, so a typo fails
here, before any job starts, and ``python -m train`` never sees a ``launcher`` key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

import core.config
from core.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

# The run name becomes a directory, a rendezvous id and a SLURM job name: keep it to safe characters.
_RUN_NAME = re.compile(r"[A-Za-z0-9._/-]+")


class LauncherKind(Enum):
    """How processes are started."""

    local = "local"  # one process: python -m train
    torchrun = "torchrun"  # torchrun on this node (run the same command on every node when nnodes > 1)
    deepspeed = "deepspeed"  # the deepspeed launcher, once, reaching every host of its hostfile over ssh
    slurm = "slurm"  # an sbatch script: srun starts one torchrun per node


@dataclass
class LauncherConfig:
    """Where and how ``python -m train`` runs. Read only by ``python -m launch``."""

    kind: LauncherKind = LauncherKind.local
    nnodes: int = 1
    nproc_per_node: int = 1  # processes (GPUs) per node
    rdzv_port: int = 29500  # c10d rendezvous (torchrun) or master port (deepspeed) on the first node
    hostfile: str = "hostfile"  # deepspeed only: lines of "<host> slots=<gpus>"
    partition: str | None = None  # slurm only; None leaves it to the cluster default or $SBATCH_PARTITION
    time: str = "24:00:00"  # slurm wall-clock limit, HH:MM:SS or D-HH:MM:SS
    cpus_per_task: int = 8  # slurm: one task per node, so all CPUs of a node's ranks and data workers
    account: str | None = None  # slurm account to charge, if the cluster wants one
    sbatch_extra: list[str] = field(default_factory=list)  # more "#SBATCH" options, e.g. ["--mem=0"]
    gpu_gib: float = 80.0  # one GPU's memory: every launch is planned against it first (train/plan.py)

    def __post_init__(self) -> None:
        issues = []
        if self.nnodes < 1 or self.nproc_per_node < 1:
            issues.append("launcher.nnodes and launcher.nproc_per_node must be at least 1")
        if self.kind is LauncherKind.local and (self.nnodes, self.nproc_per_node) != (1, 1):
            issues.append("launcher.kind=local runs one process: use a torchrun launcher for more")
        if issues:
            raise ConfigError("; ".join(issues))


@dataclass
class LaunchConfig:
    """Root of ``conf/launch.yaml``."""

    launcher: LauncherConfig = field(default_factory=LauncherConfig)


@dataclass
class Launch:
    """Everything a launch needs: the launcher, the train overrides to pass on, and the fixed run."""

    launcher: LauncherConfig
    overrides: list[str]  # the user's train overrides, verbatim, without run_name
    run_name: str  # fixed once here and passed to every rank
    run_dir: str
    named_by_user: bool  # run_name came from the command line (the same on every node)


def register_configs() -> None:
    """Register the schema ``conf/launch.yaml`` extends."""
    ConfigStore.instance().store(name="launch_schema", node=LaunchConfig)


def compose_launch(args: list[str], now: datetime | None = None) -> Launch:
    """Compose the launcher and the training config from command-line overrides.

    Args:
        args: Hydra overrides; ``launcher=NAME`` and ``launcher.KEY=VALUE`` select and adjust the launcher,
            all others go to ``python -m train`` verbatim.
        now: the time stamped into the run name when the user gave none (default: now).

    Returns:
        The launch, with ``run_name`` fixed: the user's ``run_name=`` resolved once, or the experiment's
        run name plus a timestamp taken once.

    Raises:
        ConfigError: a sweep override, a bad run name or an inconsistent launcher.
        hydra.errors.ConfigCompositionException: an unknown key or a wrong type, named.
    """
    launcher_args, train_args = _split(args)
    register_configs()
    core.config.register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="launch"):
        launcher = _to_launcher(compose("launch", overrides=launcher_args).launcher)
        cfg = compose("train", overrides=train_args)
    named_by_user = any(_key(a) == "run_name" for a in train_args)
    # Reading cfg.run_name resolves any interpolation (${now:...}) here, once, instead of on every rank.
    run_name = cfg.run_name if named_by_user else f"{cfg.run_name}_{(now or datetime.now()):%Y%m%d-%H%M%S}"
    if not _RUN_NAME.fullmatch(run_name):
        raise ConfigError(f"run_name={run_name!r}: use letters, digits and . _ - / only")
    run_dir = OmegaConf.merge(cfg, {"run_name": run_name}).run_dir  # the run directory of that name
    overrides = [a for a in train_args if _key(a) != "run_name"]
    return Launch(launcher, overrides, run_name, str(run_dir), named_by_user)


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    """Split overrides into the launcher's and train's, refusing sweeps."""
    parsed = OverridesParser.create().parse_overrides(args)
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    if sweeps:
        raise ConfigError(
            f"{sweeps}: a launch is one run. Sweep with python -m train -m hydra/launcher=submitit_slurm …"
        )
    is_launcher = [o.key_or_group.split(".")[0] == "launcher" for o in parsed]
    launcher = [a for a, own in zip(args, is_launcher, strict=True) if own]
    return launcher, [a for a, own in zip(args, is_launcher, strict=True) if not own]


def _key(override: str) -> str:
    return OverridesParser.create().parse_override(override).key_or_group


def _to_launcher(node: DictConfig) -> LauncherConfig:
    launcher = OmegaConf.to_object(node)
    assert isinstance(launcher, LauncherConfig)
    return launcher
