"""Evaluate a model or a training checkpoint on V2P-Bench and OVIBench.

    python -m eval model=qwen2_5_vl_7b media=qwen_64f eval.settings.v2p.root=/data/V2P-Bench \
        eval.benchmarks=[v2p]
    python -m eval data=synthetic   # the tiny model on the synthetic twins (built first when absent)
    python -m eval checkpoint=outputs/quickstart/checkpoints/checkpoint-1000 run_name=quickstart_eval
    python -m eval score_file=/data/V2P-Bench/responses.jsonl run_name=score_qwen   # no model runs
    python -m eval data=synthetic show_prompt=ITEM_ID   # the exact prompt of one item, as rendered
    python -m eval compare RESULTS_A RESULTS_B --out DIR   # paired comparison (eval/compare.py)
    python -m eval view RUN_DIR   # the results viewer: one self-contained HTML page (eval/view.py)
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from core.cli import run_cli
from core.config import EvalRunConfig, register_configs
from core.rundir import RunDir
from eval.benchmarks import settings_schemas

register_configs(settings_schemas())


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    from eval.run import run

    config: EvalRunConfig = OmegaConf.to_object(cfg)
    if config.show_prompt:  # print one item's rendered prompt; no model runs
        from eval.show_prompt import show_prompt

        run_cli(lambda: print(show_prompt(config, config.show_prompt)))
    elif config.score_file:  # score a response file; no model runs
        from eval.score_responses import score_file

        tables = RunDir(config.run_dir).response_tables_file
        run_cli(lambda: print(score_file(config.score_file, tables), end=""))
    else:
        run_cli(lambda: _print_result(run(config), RunDir(config.run_dir)))


def _print_result(summary: dict, run_dir: RunDir) -> None:
    from eval.headline import headline

    print(headline(summary), f"report: {run_dir.report_file}", sep="\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["compare"]:  # a subcommand with its own arguments, not a Hydra override
        from eval.compare import main as compare_main

        compare_main(sys.argv[2:])
    elif sys.argv[1:2] == ["view"]:  # the results viewer of a run directory (eval/view.py)
        from eval.view import main as view_main

        view_main(sys.argv[2:])
    else:
        main()
