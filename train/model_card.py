"""The model card saved with the tuned weights: ``final/README.md`` in the Hub's format.

Its metadata (``huggingface_hub.ModelCardData``) names the base model, the training datasets and, as
``model-index`` results, every overall metric of the last checkpoint (the weights in ``final/``) on each
benchmark of ``summary.json``, with its delta from the reference and the delta's paired 95% interval. Its
text says how the model was trained and, beside every figure, the protocol it was made under: the project
never reports a number without it. Pushing the folder to the Hub stays the user's own call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from core.config import ModelConfig, PeftMethod, TrainConfig
from core.files import markdown_table, write_text_atomic
from core.rundir import RunDir
from eval.benchmarks import BENCHMARKS
from eval.summary_schema import reference_name

TASK = "video-text-to-text"  # the Hub's task of a model answering in text about videos and images

# What a benchmark's summary entry says about how its numbers were made, in the order the card says it.
_NOTES = ("protocol", "aggregation", "reconstructed", "reward", "not_comparable", "not_scored", "settings")
# What the summary says about how every benchmark's numbers were made.
_RUN_NOTES = ("media_spec", "generation", "judge", "quarantine")


def write_model_card(run_dir: RunDir, cfg: TrainConfig, summary: dict[str, Any]) -> Path:
    """Write the model card of the run's tuned weights (``run_dir.model_card_file``, atomically) from the
    run's config and its ``summary.json`` (``{}``: the training evaluated nothing); rank 0 calls it. It
    replaces the placeholder card PEFT saves with an adapter."""
    path = run_dir.model_card_file
    write_text_atomic(path, str(model_card(cfg, summary)))
    return path


def model_card(cfg: TrainConfig, summary: dict[str, Any]) -> ModelCard:
    """The card: the Hub's metadata, then the training recipe and the evaluation with its protocols."""
    model = tuned_model(summary)
    data = ModelCardData(
        model_name=cfg.run_name,
        base_model=hub_model_id(cfg.model),
        datasets=[dataset_name(path) for path in cfg.data.train] or None,
        library_name="transformers" if cfg.peft.method is PeftMethod.full else "peft",
        pipeline_tag=TASK,
        tags=[cfg.model.family.value, cfg.stage.method.value, cfg.peft.method.value, "vlm-interact"],
        eval_results=eval_results(cfg, summary, model) if model else None,
    )
    body = "\n\n".join([_heading(cfg, model), _recipe(cfg), _evaluation(cfg, summary, model)])
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}\n")


def tuned_model(summary: dict[str, Any]) -> str | None:
    """The summary's name of the weights saved in ``final/``: its last checkpoint (the Trainer saves one at
    the last step); None when nothing was evaluated."""
    checkpoints = summary.get("checkpoints") or []
    return checkpoints[-1]["name"] if checkpoints else None


def hub_model_id(cfg: ModelConfig) -> str | None:
    """The base model's Hub id; None for a local checkpoint directory, which the Hub refuses as
    ``base_model`` when the card is pushed (the card's text names it instead)."""
    return None if Path(cfg.name_or_path).exists() else cfg.name_or_path


def dataset_name(path: str) -> str:
    """A training dataset as the card names it: its directory's name (the path is the training machine's),
    or for a builder's ``<build>/hf`` (data_builders/outputs.py) its build's."""
    directory = Path(path)
    return directory.parent.name if directory.name == "hf" else directory.name


def eval_results(cfg: TrainConfig, summary: dict[str, Any], model: str) -> list[EvalResult]:
    """One ``model-index`` result per overall metric of ``model`` on each benchmark: its value, and in its
    name the delta from the reference with the paired 95% interval. Per-category keys stay in
    ``summary.json``; a metric the model has no value for (unjudged, unscored) is left out."""
    reference = reference_name(summary)
    results = []
    for benchmark, entry in summary["benchmarks"].items():
        for key, metric in entry.get("metrics", {}).items():
            compared = metric["checkpoints"].get(model)
            if "/" in key or compared is None or compared["value"] is None:
                continue
            results.append(
                EvalResult(
                    task_type=TASK,
                    dataset_type=benchmark,
                    dataset_name=benchmark_name(cfg, benchmark, entry),
                    metric_type=key,
                    metric_value=compared["value"],
                    metric_name=f"{key} ({delta_text(compared)} vs {reference})",
                )
            )
    return results


def delta_text(compared: dict[str, Any]) -> str:
    """``Δ +0.4514, 95% CI [+0.3681, +0.5280], 144 paired items``; or that no item was paired."""
    if compared["delta"] is None:
        return "Δ: no item scored by both"
    interval = compared.get("delta_ci95")
    ci = f", 95% CI [{interval[0]:+.4f}, {interval[1]:+.4f}]" if interval else ""
    return f"Δ {compared['delta']:+.4f}{ci}, {compared['n_paired']} paired items"


def benchmark_name(cfg: TrainConfig, benchmark: str, entry: dict[str, Any]) -> str:
    """The benchmark as a ``model-index`` result names it: with its protocol, so that no figure on the Hub
    goes without it."""
    title = benchmark_title(cfg, benchmark)
    return f"{title}; protocol: {entry['protocol']}" if "protocol" in entry else title


def benchmark_title(cfg: TrainConfig, benchmark: str) -> str:
    """The benchmark's title, marked when its items are the synthetic build's twin of the release: a
    figure on the twin is not one on the benchmark."""
    known = BENCHMARKS.get(benchmark)
    title = known.title if known else benchmark
    return (
        f"{title}, the synthetic build's twin (not the release)"
        if is_synthetic_twin(cfg, benchmark)
        else title
    )


def is_synthetic_twin(cfg: TrainConfig, benchmark: str) -> bool:
    """Whether the benchmark's items were read from the synthetic build (``data.synthetic.root``)."""
    settings = cfg.eval.settings.get(benchmark)
    # Typed settings in the run as resolved; a plain mapping in a config read back from its YAML.
    root = settings.get("root") if isinstance(settings, dict) else getattr(settings, "root", None)
    return bool(root) and Path(root).is_relative_to(cfg.data.synthetic.root)


def _heading(cfg: TrainConfig, model: str | None) -> str:
    weights = f"the weights of `{model}`, its last checkpoint" if model else "its last weights"
    return (
        f"# {cfg.run_name}\n\n"
        f"`{cfg.model.name_or_path}` ({cfg.model.family.value}) tuned by {cfg.stage.method.value.upper()} "
        f"with {cfg.peft.method.value} (vlm-interact); this folder holds {weights}."
    )


def _recipe(cfg: TrainConfig) -> str:
    trainer, peft = cfg.trainer, cfg.peft
    base = cfg.model.name_or_path
    local = (
        " (a local checkpoint: give its Hub id as `base_model` before pushing)"
        if not hub_model_id(cfg.model)
        else ""
    )
    lines = [
        "## Training",
        "",
        f"- base model: `{base}`{local}",
        f"- stage: {cfg.stage.method.value}"
        + (f", from `{cfg.stage.start_from}`" if cfg.stage.start_from else ""),
        f"- data: {_datasets(cfg)}",
        f"- fine-tuning: {_peft(cfg)}; frozen towers: {', '.join(t.value for t in peft.freeze) or 'none'}",
        f"- steps: {trainer.max_steps}, batch {trainer.batch_size} per device × {trainer.grad_accum} "
        f"accumulated, learning rate {trainer.lr:g} ({trainer.lr_scheduler}, "
        f"warmup {trainer.warmup_ratio:g}), weight decay {trainer.weight_decay:g}, seed {trainer.seed}",
    ]
    return "\n".join(lines)


def _datasets(cfg: TrainConfig) -> str:
    names = [f"`{dataset_name(path)}`" for path in cfg.data.train]
    if cfg.data.weights:
        names = [f"{name} (weight {weight:g})" for name, weight in zip(names, cfg.data.weights, strict=True)]
    return ", ".join(names) or "none named"


def _peft(cfg: TrainConfig) -> str:
    peft = cfg.peft
    if peft.method is PeftMethod.full:
        return "full"
    return (
        f"{peft.method.value} (r {peft.r}, alpha {peft.alpha}, dropout {peft.dropout:g}) on "
        f"`{peft.target_modules}`"
        + (f", {', '.join(peft.modules_to_save)} trained fully" if peft.modules_to_save else "")
    )


def _evaluation(cfg: TrainConfig, summary: dict[str, Any], model: str | None) -> str:
    if not model:
        return (
            "## Evaluation\n\nThis training evaluated nothing itself: `summary.json` and `report.md` in "
            "its run directory hold the evaluation (`python -m eval.watch`, `python -m eval`)."
        )
    reference = reference_name(summary)
    lines = [
        "## Evaluation",
        "",
        f"`{model}` against `{reference}` on the items both scored; Δ with its paired-bootstrap 95% "
        "interval. Each figure was made under the protocol named with its benchmark; `summary.json` and "
        "`report.md` hold every category.",
    ]
    for benchmark, entry in summary["benchmarks"].items():
        lines += ["", f"### {benchmark_title(cfg, benchmark)} (`{benchmark}`), {entry['n_items']} items", ""]
        lines += [f"- {note}: {_note(entry[note])}" for note in _NOTES if note in entry]
        lines += _metrics_table(entry, model, reference)
    lines += [""]
    lines += [f"- {key}: {_note(summary[key])}" for key in _RUN_NOTES if key in summary]
    return "\n".join(lines)


def _note(value: Any) -> str:
    return value if isinstance(value, str) else f"`{json.dumps(value, sort_keys=True)}`"


def _metrics_table(entry: dict[str, Any], model: str, reference: str) -> list[str]:
    rows = []
    for key, metric in entry.get("metrics", {}).items():
        compared = metric["checkpoints"].get(model)
        if "/" in key or compared is None:
            continue
        rows.append([key, _value(metric["baseline"]), _value(compared["value"]), delta_text(compared)])
    if not rows:
        return []
    return ["", *markdown_table(["metric", reference, model, "Δ"], rows)]


def _value(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"
