"""Start a training run on one GPU, one node, several nodes or SLURM, with one fixed run name for all ranks.

python -m launch +exp=ovi_lora launcher=torchrun_1x8                        # one node, 8 GPUs
python -m launch +exp=ovi_lora launcher=torchrun_2x8 --dry-run              # the command for each node
python -m launch +exp=ovi_lora launcher=slurm_2x8 launcher.partition=a100   # render and sbatch the script
python -m launch +exp=ovi_lora launcher=deepspeed_2x8 trainer.max_steps=500 run_name=ovi_500
Every other override goes to ``python -m train`` verbatim. Sweeps: python -m train -m hydra/launcher=…
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from core.errors import ConfigError
from core.files import write_text_atomic
from launch.commands import dry_run_text, expand_env, launch_argv, sbatch_script, shell_join
from launch.config import Launch, LauncherKind, compose_launch


def main(argv: list[str] | None = None) -> int:
    """Compose the launch; print it (``--dry-run``) or run it. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m launch", description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    parser.add_argument("overrides", nargs="*", help="launcher=NAME, launcher.KEY=VALUE, train overrides")
    args = parser.parse_intermixed_args(argv)
    try:
        launch = compose_launch(args.overrides)
        if args.dry_run:
            print(dry_run_text(launch), end="")
            return 0
        return _run(launch)
    except (ConfigError, HydraException, OmegaConfBaseException, FileNotFoundError) as exc:
        cause = f"\n  {str(exc.__cause__).splitlines()[0]}" if exc.__cause__ else ""
        print(f"error: {exc}{cause}", file=sys.stderr)
        return 2


def _run(launch: Launch) -> int:
    cfg = launch.launcher
    if cfg.kind is LauncherKind.torchrun and cfg.nnodes > 1 and not launch.named_by_user:
        # Each node runs its own launcher, and their timestamps would differ.
        raise ConfigError("several nodes: pass the same run_name=NAME on each, or run --dry-run's command")
    if cfg.kind is LauncherKind.slurm:
        script = Path(launch.run_dir) / "launch.sbatch"
        write_text_atomic(script, sbatch_script(launch))
        argv = ["sbatch", str(script)]
    else:
        argv = expand_env(launch_argv(launch), os.environ)
    print(shell_join(argv), flush=True)
    return subprocess.run(argv, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
