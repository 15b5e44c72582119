"""Start a training run on one GPU, one node, several nodes or SLURM, with one fixed run name for all ranks.

python -m launch +exp=ovi_lora launcher=torchrun_1x8                        # one node, 8 GPUs
python -m launch +exp=ovi_lora launcher=torchrun_2x8 --dry-run              # the command for each node
python -m launch +exp=ovi_lora launcher=slurm_2x8 launcher.partition=a100   # render and sbatch the script
python -m launch +exp=ovi_lora launcher=deepspeed_2x8 trainer.max_steps=500 run_name=ovi_500
Every other override goes to ``python -m train`` verbatim. Sweeps: python -m train -m hydra/launcher=…

Every launch is planned first (``python -m train … plan=true`` for the launcher's GPUs, ``launcher.gpu_gib``
each; train/plan.py): a run whose plan says ``oom``, or that cannot be planned, is not started unless
``--go-anyway`` says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from core.errors import ConfigError
from core.files import write_text_atomic
from core.rundir import RunDir
from launch.commands import dry_run_text, expand_env, launch_argv, plan_argv, sbatch_script, shell_join
from launch.config import Launch, LauncherKind, compose_launch


def main(argv: list[str] | None = None) -> int:
    """Compose the launch; print it (``--dry-run``) or run it. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m launch", description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    parser.add_argument(
        "--go-anyway", action="store_true", help="start the run even when its plan says it will not fit"
    )
    parser.add_argument("overrides", nargs="*", help="launcher=NAME, launcher.KEY=VALUE, train overrides")
    args = parser.parse_intermixed_args(argv)
    try:
        launch = compose_launch(args.overrides)
        if args.dry_run:
            print(dry_run_text(launch), end="")
            return 0
        refusal = plan_refusal(launch)
        if refusal and not args.go_anyway:
            print(f"error: {refusal}; --go-anyway starts it all the same", file=sys.stderr)
            return 2
        return _run(launch)
    except (ConfigError, HydraException, OmegaConfBaseException, FileNotFoundError) as exc:
        cause = f"\n  {str(exc.__cause__).splitlines()[0]}" if exc.__cause__ else ""
        print(f"error: {exc}{cause}", file=sys.stderr)
        return 2


def plan_refusal(launch: Launch) -> str | None:
    """Plan the run (a ``python -m train`` process: this one never imports torch); why it should not start,
    or None when its plan's verdict is ``fits`` or ``tight``."""
    argv = plan_argv(launch, sys.executable)
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    print(done.stdout, end="", flush=True)
    run_dir = RunDir(launch.run_dir)
    plan_file = run_dir.plan_file
    if done.returncode != 0 or not plan_file.exists():
        why = (done.stderr.strip().splitlines() or ["no plan.json written"])[-1]
        return f"the run could not be planned ({why})"
    verdict = json.loads(plan_file.read_text())["verdict"]
    if verdict == "oom":
        gpu, report = launch.launcher.gpu_gib, run_dir.plan_report_file
        return f"the plan predicts it will not fit in launcher.gpu_gib={gpu:g} (see {report})"
    return None


def _run(launch: Launch) -> int:
    cfg = launch.launcher
    if cfg.kind is LauncherKind.torchrun and cfg.nnodes > 1 and not launch.named_by_user:
        # Each node runs its own launcher, and their timestamps would differ.
        raise ConfigError("several nodes: pass the same run_name=NAME on each, or run --dry-run's command")
    if cfg.kind is LauncherKind.slurm:
        script = RunDir(launch.run_dir).launch_script_file
        write_text_atomic(script, sbatch_script(launch))
        argv = ["sbatch", str(script)]
    else:
        argv = expand_env(launch_argv(launch), os.environ)
    print(shell_join(argv), flush=True)
    return subprocess.run(argv, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
