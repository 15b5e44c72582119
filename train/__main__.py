"""Fine-tune a video VLM and evaluate it after every checkpoint.

python -m train +exp=quickstart            # tiny model, synthetic data, CPU, a few minutes
python -m train +exp=ovi_lora              # Qwen2.5-VL-7B-Instruct, LoRA on OVI-Train
python -m train +exp=ovi_lora --cfg job    # print the composed config and exit
python -m train +exp=ovi_lora plan=true    # plan it at the released size: memory per GPU, a verdict
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from core.cli import run_cli
from core.config import EvalMode, TrainConfig, register_configs
from eval.benchmarks import settings_schemas
from train.stage_settings import STAGE_SETTINGS

register_configs(settings_schemas(), STAGE_SETTINGS)


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    from core.distributed import is_main
    from core.rundir import RunDir
    from eval.evaluation import Evaluation
    from train.recipe import train

    config: TrainConfig = OmegaConf.to_object(cfg)

    def plan() -> None:
        from train.plan import plan_run
        from train.plan_report import plan_headline

        print(plan_headline(plan_run(config)))

    def work() -> None:
        summary = train(config).summary
        if not is_main():  # the other ranks of a multi-process run hold no summary
            return
        if config.eval.mode is EvalMode.inline or not config.eval.benchmarks:
            print(Evaluation.headline(summary), f"\nreport: {RunDir(config.run_dir).report_file}", sep="")
        else:
            print(f"checkpoints are evaluated by: python -m eval.watch {config.run_dir}")

    run_cli(plan if config.plan else work)


if __name__ == "__main__":
    main()
