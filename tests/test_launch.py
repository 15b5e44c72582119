"""python -m launch: the exact commands it prints, one run name for every rank, no torch, typos caught."""

from __future__ import annotations

import shlex
import subprocess
import sys
from datetime import datetime

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from paths import REPO

import launch.__main__ as launch_main
from core.errors import ConfigError
from launch.commands import deepspeed_argv, dry_run_text, expand_env, plan_argv, shell_join, torchrun_argv
from launch.config import (
    CONF_DIR,
    LaunchConfig,
    LauncherConfig,
    compose_launch,
    register_configs,
)

LAUNCHERS = sorted(p.stem for p in (CONF_DIR / "launcher").glob("*.yaml"))
USER = [
    "+exp=ovi_lora",
    "trainer.max_steps=500",
    "eval.settings.v2p.root=/data/V2P Bench",
    "eval.settings.ovi.root=${oc.env:OVI}",
]
QUOTED = (
    "+exp=ovi_lora trainer.max_steps=500 'eval.settings.v2p.root=/data/V2P Bench' "
    "'eval.settings.ovi.root=${oc.env:OVI}'"
)

TORCHRUN_2X8 = f"""\
# Run on each of the 2 nodes, with MASTER_ADDR set to the first node's address:
torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "$MASTER_ADDR:29500" \
--rdzv_id ovi_lora_2x8 -m train {QUOTED} run_name=ovi_lora_2x8
"""

SLURM_2X8 = f"""\
#!/bin/bash
#SBATCH --job-name=ovi_lora_2x8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=96
#SBATCH --time=24:00:00
#SBATCH --partition=gpu
set -euo pipefail

# The first node hosts the c10d rendezvous; srun starts one torchrun per node.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR
# Slurm 22.05 stopped passing sbatch's --cpus-per-task on to srun: without this a node's ranks and
# data workers may share one core.
export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
srun torchrun --nnodes "$SLURM_NNODES" --nproc_per_node 8 --rdzv_backend c10d \
--rdzv_endpoint "$MASTER_ADDR:29500" --rdzv_id "$SLURM_JOB_ID" -m train {QUOTED} run_name=ovi_lora_2x8
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launch", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def _launch(launcher: str, *extra: str):
    return compose_launch([*USER, f"launcher={launcher}", "run_name=ovi_lora_2x8", *extra])


def test_torchrun_2x8_dry_run_prints_the_command_for_every_node():
    result = _cli(*USER, "launcher=torchrun_2x8", "run_name=ovi_lora_2x8", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout == TORCHRUN_2X8


def test_slurm_2x8_dry_run_prints_the_sbatch_script():
    result = _cli("--dry-run", *USER, "launcher=slurm_2x8", "run_name=ovi_lora_2x8")
    assert result.returncode == 0, result.stderr
    assert result.stdout == SLURM_2X8


@pytest.mark.parametrize(
    ("launcher", "expected"),
    [
        ("local", f"python -m train {QUOTED} run_name=ovi_lora_2x8\n"),
        (
            "torchrun_1x8",
            f"torchrun --standalone --nproc_per_node 8 -m train {QUOTED} run_name=ovi_lora_2x8\n",
        ),
        (
            "deepspeed_2x8",
            "# Run once on the first host of hostfile; it starts the ranks on every host:\n"
            "deepspeed --hostfile hostfile --num_nodes 2 --num_gpus 8 --master_port 29500 --no_local_rank "
            f"--module train {QUOTED} run_name=ovi_lora_2x8\n",
        ),
    ],
)
def test_single_command_launchers(launcher, expected):
    assert dry_run_text(_launch(launcher)) == expected


def test_launcher_overrides_adjust_the_script_and_never_reach_train():
    extra = ["launcher.partition=a100", "launcher.account=proj", "launcher.sbatch_extra=['--mem=0']"]
    script = dry_run_text(_launch("slurm_2x8", *extra))
    assert "#SBATCH --partition=a100\n#SBATCH --account=proj\n#SBATCH --mem=0\n" in script
    assert "launcher" not in script.splitlines()[-1]


def test_user_overrides_pass_through_verbatim():
    launch = _launch("torchrun_1x8")
    assert launch.overrides == USER
    words = shlex.split(dry_run_text(launch))
    assert words[words.index("train") + 1 :] == [*USER, "run_name=ovi_lora_2x8"]


def test_run_name_is_fixed_once_from_the_experiment_and_a_timestamp():
    launch = compose_launch(["+exp=ovi_lora", "launcher=torchrun_2x8"], now=datetime(2025, 1, 2, 3, 4, 5))
    assert launch.run_name == "ovi_lora_20250102-030405" and not launch.named_by_user
    assert launch.run_dir == "outputs/ovi_lora_20250102-030405"
    text = dry_run_text(launch)
    assert text.count("ovi_lora_20250102-030405") == 2  # the rendezvous id and run_name=, nothing per rank
    assert "${now:" not in text


def test_user_run_name_is_resolved_once_and_passed_once():
    launch = compose_launch(["+exp=ovi_lora", "output_root=/runs", "run_name=x_${trainer.max_steps}"])
    assert (launch.run_name, launch.run_dir, launch.named_by_user) == ("x_2000", "/runs/x_2000", True)
    assert dry_run_text(launch).count("run_name=") == 1


def test_launch_never_imports_torch():
    code = "import sys, launch.__main__, launch.commands; assert 'torch' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_launcher_composes_to_the_schema(launcher):
    assert isinstance(compose_launch([f"launcher={launcher}"]).launcher, LauncherConfig)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("launcher.partiton=a100", "partiton"),
        ("launcher.kind=slurmm", "kind=slurmm"),
        ("launcher.nnodes=two", "nnodes"),
        ("launcher=slurm_8x8", "launcher/slurm_8x8"),
        ("trainer.max_step=3", "max_step"),
    ],
)
def test_typos_fail_at_compose_time(override, message):
    with pytest.raises(ConfigCompositionException, match=message):
        compose_launch(["+exp=ovi_lora", "launcher=slurm_2x8", override])


def test_typo_is_one_clear_error_on_the_command_line():
    result = _cli("+exp=ovi_lora", "launcher=slurm_2x8", "launcher.partiton=a100", "--dry-run")
    assert result.returncode == 2 and result.stdout == ""
    assert "Key 'partiton' not in 'LauncherConfig'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["launcher=local", "launcher.nproc_per_node=8"],  # inconsistent launcher
        ["trainer.lr=1e-4,2e-4"],  # a sweep
        ["run_name=a b"],  # not a directory-safe name
    ],
)
def test_bad_launches_are_refused(args):
    with pytest.raises(ConfigError):
        compose_launch(["+exp=ovi_lora", *args])


@pytest.fixture
def planned_to_fit(monkeypatch):
    """Launches whose plan (a real ``python -m train … plan=true``, tested in test_plan.py) says fits."""
    monkeypatch.setattr(launch_main, "plan_refusal", lambda launch: None)


def test_run_starts_the_printed_command(monkeypatch, capsys, planned_to_fit):
    started = []
    monkeypatch.setattr(launch_main.subprocess, "run", lambda argv, check: started.append(argv) or _Done())
    assert launch_main.main(["+exp=ovi_lora", "launcher=torchrun_1x8", "run_name=r1"]) == 0
    assert started == [
        ["torchrun", "--standalone", "--nproc_per_node", "8", "-m", "train", "+exp=ovi_lora", "run_name=r1"]
    ]
    assert capsys.readouterr().out == shell_join(started[0]) + "\n"


def test_slurm_run_writes_the_script_into_the_run_dir_and_submits_it(monkeypatch, tmp_path, planned_to_fit):
    started = []
    monkeypatch.setattr(launch_main.subprocess, "run", lambda argv, check: started.append(argv) or _Done())
    args = ["+exp=ovi_lora", "launcher=slurm_2x8", f"output_root={tmp_path}", "run_name=r2"]
    assert launch_main.main(args) == 0
    script = tmp_path / "r2" / "launch.sbatch"
    assert started == [["sbatch", str(script)]]
    assert script.read_text() == dry_run_text(compose_launch(args))


def test_multi_node_torchrun_needs_one_name_for_all_nodes(monkeypatch, planned_to_fit):
    monkeypatch.setattr(launch_main.subprocess, "run", lambda argv, check: pytest.fail("must not start"))
    assert launch_main.main(["+exp=ovi_lora", "launcher=torchrun_2x8"]) == 2


def test_a_run_planned_not_to_fit_is_not_started_unless_told_to_go_anyway(monkeypatch, capsys):
    started = []
    monkeypatch.setattr(launch_main, "plan_refusal", lambda launch: "the plan predicts it will not fit")
    monkeypatch.setattr(launch_main.subprocess, "run", lambda argv, check: started.append(argv) or _Done())
    args = ["+exp=ovi_lora", "launcher=torchrun_1x8", "run_name=r3"]
    assert launch_main.main(args) == 2
    assert started == []
    assert "will not fit; --go-anyway starts it" in capsys.readouterr().err
    assert launch_main.main(["--go-anyway", *args]) == 0
    assert len(started) == 1


def test_the_plan_is_made_for_the_launchers_gpus():
    launch = _launch("torchrun_2x8", "launcher.gpu_gib=141")
    argv = plan_argv(launch)
    assert argv[:3] == ["python", "-m", "train"]
    assert argv[-3:] == ["plan_gpus=16", "plan_gpu_gib=141", "plan=true"]
    assert f"run_name={launch.run_name}" in argv


def test_master_addr_is_read_where_the_command_runs():
    argv = torchrun_argv(_launch("torchrun_2x8"))
    assert "10.0.0.1:29500" in expand_env(argv, {"MASTER_ADDR": "10.0.0.1"})
    with pytest.raises(ConfigError, match="MASTER_ADDR"):
        expand_env(argv, {})


def test_commands_parse_with_the_real_torchrun_and_deepspeed():
    run = pytest.importorskip("torch.distributed.run")
    args = run.get_args_parser().parse_args(torchrun_argv(_launch("torchrun_2x8"))[1:])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "8", "c10d")
    assert args.module and args.training_script == "train"
    assert args.training_script_args == [*USER, "run_name=ovi_lora_2x8"]
    runner = pytest.importorskip("deepspeed.launcher.runner")
    args = runner.parse_args(deepspeed_argv(_launch("deepspeed_2x8"))[1:])
    assert (args.num_nodes, args.num_gpus, args.master_port) == (2, 8, 29500)
    assert args.module and args.no_local_rank and args.user_script == "train"
    assert args.user_args == [*USER, "run_name=ovi_lora_2x8"]


def test_launch_schema_is_its_own_primary_config(compose):
    register_configs()
    cfg = compose("launch", typed=False)
    assert isinstance(OmegaConf.to_object(cfg), LaunchConfig) and set(cfg) == {"launcher"}


def test_sweep_run_names_give_every_job_its_own_run_dir():
    # The README's submitit sweep names each job's run after its swept value.
    dirs = {
        compose_launch(["+exp=ovi_lora", "run_name=ovi_lr${trainer.lr}", f"trainer.lr={lr}"]).run_dir
        for lr in ("1e-4", "2e-4")
    }
    assert dirs == {"outputs/ovi_lr0.0001", "outputs/ovi_lr0.0002"}


def test_submitit_sweep_config_composes(compose):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    overrides = [
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.nodes=1",
        "hydra.launcher.tasks_per_node=1",
        "hydra.launcher.gpus_per_node=1",
        "hydra.launcher.cpus_per_task=16",
        "hydra.launcher.timeout_min=1440",
        "+exp=ovi_lora",
        "run_name=ovi_lr${trainer.lr}",
    ]
    cfg = compose("train", *overrides, typed=False, return_hydra_config=True)
    assert cfg.hydra.launcher.gpus_per_node == 1 and "launcher" not in cfg


class _Done:
    returncode = 0
