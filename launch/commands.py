"""Pure builders of launch commands: argv lists and sbatch text from a :class:`Launch`.

Nothing here runs anything or reads the environment, so ``--dry-run`` prints exactly what a launch runs
and the tests can pin the text. A few words are shell variables resolved where the command runs
(``$MASTER_ADDR`` on each node, ``$SLURM_*`` inside the job); every other word is shell-quoted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from core.errors import ConfigError
from launch.config import Launch, LauncherKind

# Words we emit ourselves that the shell must expand: "$NAME" or "$NAME:port". User overrides are never
# treated so: they always contain "=" (or start with "~"), and are single-quoted when needed.
_ENV_WORD = re.compile(r"\$([A-Z_]+)(:\d+)?")


def train_args(launch: Launch) -> list[str]:
    """The arguments after ``-m train``: the user's overrides verbatim, then the fixed run name."""
    return [*launch.overrides, f"run_name={launch.run_name}"]


def plan_argv(launch: Launch, python: str = "python") -> list[str]:
    """``python -m train … plan=true``: the run planned for the launcher's GPUs (train/plan.py)."""
    cfg = launch.launcher
    world = cfg.nnodes * cfg.nproc_per_node
    planned = [f"plan_gpus={world}", f"plan_gpu_gib={cfg.gpu_gib:g}", "plan=true"]
    return [python, "-m", "train", *train_args(launch), *planned]


def local_argv(launch: Launch) -> list[str]:
    """One process: ``python -m train …``."""
    return ["python", "-m", "train", *train_args(launch)]


def torchrun_argv(launch: Launch, nnodes: str | None = None, rdzv_id: str | None = None) -> list[str]:
    """``torchrun … -m train …``; one node uses a private rendezvous, several a c10d one on $MASTER_ADDR.

    Args:
        launch: the launch.
        nnodes: the ``--nnodes`` word (default: the launcher's count; SLURM passes ``$SLURM_NNODES``).
        rdzv_id: the rendezvous id (default: the run name, the same on every node).
    """
    cfg = launch.launcher
    if cfg.nnodes == 1 and nnodes is None:
        head = ["--standalone", "--nproc_per_node", str(cfg.nproc_per_node)]
    else:
        head = [
            *("--nnodes", nnodes or str(cfg.nnodes), "--nproc_per_node", str(cfg.nproc_per_node)),
            *("--rdzv_backend", "c10d", "--rdzv_endpoint", f"$MASTER_ADDR:{cfg.rdzv_port}"),
            *("--rdzv_id", rdzv_id or launch.run_name),
        ]
    return ["torchrun", *head, "-m", "train", *train_args(launch)]


def deepspeed_argv(launch: Launch) -> list[str]:
    """``deepspeed --hostfile … --module train …``, run once on the first host."""
    cfg = launch.launcher
    return [
        *("deepspeed", "--hostfile", cfg.hostfile, "--num_nodes", str(cfg.nnodes)),
        *("--num_gpus", str(cfg.nproc_per_node), "--master_port", str(cfg.rdzv_port)),
        # Ranks read LOCAL_RANK from the environment; a --local_rank argument would not parse as an override.
        *("--no_local_rank", "--module", "train", *train_args(launch)),
    ]


def sbatch_script(launch: Launch) -> str:
    """The sbatch script: one task per node, each running torchrun for that node's GPUs."""
    cfg = launch.launcher
    options = [
        f"--job-name={launch.run_name}",
        f"--nodes={cfg.nnodes}",
        "--ntasks-per-node=1",
        f"--gpus-per-node={cfg.nproc_per_node}",
        f"--cpus-per-task={cfg.cpus_per_task}",
        f"--time={cfg.time}",
        *([f"--partition={cfg.partition}"] if cfg.partition else []),
        *([f"--account={cfg.account}"] if cfg.account else []),
        *cfg.sbatch_extra,
    ]
    srun = ["srun", *torchrun_argv(launch, nnodes="$SLURM_NNODES", rdzv_id="$SLURM_JOB_ID")]
    lines = [
        "#!/bin/bash",
        *(f"#SBATCH {option}" for option in options),
        "set -euo pipefail",
        "",
        "# The first node hosts the c10d rendezvous; srun starts one torchrun per node.",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "export MASTER_ADDR",
        "# Slurm 22.05 stopped passing sbatch's --cpus-per-task on to srun: without this a node's ranks and",
        "# data workers may share one core.",
        'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"',
        shell_join(srun),
    ]
    return "\n".join(lines) + "\n"


def launch_argv(launch: Launch) -> list[str]:
    """The argv that starts the run from this machine (``sbatch`` submission aside)."""
    builders = {
        LauncherKind.local: local_argv,
        LauncherKind.torchrun: torchrun_argv,
        LauncherKind.deepspeed: deepspeed_argv,
    }
    return builders[launch.launcher.kind](launch)


def dry_run_text(launch: Launch) -> str:
    """What ``--dry-run`` prints: shell text that can be pasted, or the sbatch script itself."""
    cfg = launch.launcher
    if cfg.kind is LauncherKind.slurm:
        return sbatch_script(launch)
    command = shell_join(launch_argv(launch))
    if cfg.kind is LauncherKind.torchrun and cfg.nnodes > 1:
        where = f"# Run on each of the {cfg.nnodes} nodes, with MASTER_ADDR set to the first node's address:"
        return f"{where}\n{command}\n"
    if cfg.kind is LauncherKind.deepspeed:
        where = f"# Run once on the first host of {cfg.hostfile}; it starts the ranks on every host:"
        return f"{where}\n{command}\n"
    return command + "\n"


def shell_join(argv: list[str]) -> str:
    """Join argv into one shell line: our variable words double-quoted, everything else shell-quoted."""
    return " ".join(f'"{word}"' if _ENV_WORD.fullmatch(word) else shlex.quote(word) for word in argv)


def expand_env(argv: list[str], environ: Mapping[str, str]) -> list[str]:
    """Resolve our variable words (``$MASTER_ADDR:29500``) from ``environ``, as the shell would.

    Raises:
        ConfigError: a variable the command needs is not set; the message names it.
    """
    expanded = []
    for word in argv:
        match = _ENV_WORD.fullmatch(word)
        if match and match.group(1) not in environ:
            raise ConfigError(f"set {match.group(1)} (the first node's address) before launching")
        expanded.append(environ[match.group(1)] + (match.group(2) or "") if match else word)
    return expanded
