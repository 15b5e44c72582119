"""The exact prompt a model is given for one benchmark item (``python -m eval show_prompt=ID``).

The item is rendered by the run's own chat adapter (family, chat format, media spec, input order), so
what is printed is what generation sees: the text, each video span and image with the frames and pixels
it becomes, and the token count after the processor expands them. An OVIBench item under the paper's
protocol is answered in two steps; both are printed, with the model's own answer (cut at the
interruption) marked where it goes. Only the processor is loaded, not the weights.
"""

from __future__ import annotations

from core.config import EvalRunConfig, OviProtocol
from core.errors import ConfigError
from core.media import FrameCache
from core.sample import Sample
from eval.benchmarks import BENCHMARKS, settings_of
from eval.run import resolve
from eval.run_models import open_models
from models.chat import Rendered, VideoChatAdapter
from models.ovi_simulation import interruption_cut, prepare_inputs


def show_prompt(cfg: EvalRunConfig, item_id: str) -> str:
    """The rendered prompt of ``item_id`` in each configured benchmark that has it (a diagnostic derived
    from V2P-Bench keeps its source's ids), as text to print.

    Raises:
        ConfigError: no configured benchmark has an item with that id.
    """
    run = resolve(cfg)
    cfg = run.cfg
    found = _find(cfg, item_id)
    chat = open_models(run, FrameCache(cfg.data.frame_cache), serve=False).chat  # the processor, no weights
    return "\n\n".join(_shown(cfg, chat, bench, sample) for bench, sample in found)


def _shown(cfg: EvalRunConfig, chat: VideoChatAdapter, bench: str, sample: Sample) -> str:
    item_id = sample.id
    title = (
        f"{item_id} ({bench}, family {cfg.model.family}, chat format {cfg.model.chat_format}, "
        f"media {cfg.media.fingerprint})"
    )
    protocol = BENCHMARKS[bench].protocol(sample.meta, settings_of(BENCHMARKS[bench], cfg.eval))
    if protocol != OviProtocol.simulated:
        rendered = chat.render(sample, for_generation=True)
        n_tokens = chat.batch([rendered], padding_side="left")["input_ids"].shape[1]
        return f"# {title}\n\n{_describe(rendered, n_tokens)}"
    steps = prepare_inputs(chat, sample)  # what the simulation itself feeds the model
    return "\n\n".join(
        [
            f"# {title}: the paper's offline simulation, in two steps",
            "## 1. The question: the model answers (greedy)",
            _describe(steps.prefix_rendered, steps.prefix["input_ids"].shape[1]),
            f"## 2. Its own answer, cut after {interruption_cut(sample)} tokens, then the interruption; "
            "the model reacts",
            "<the model's own answer, cut>"
            + _describe(steps.appended_rendered, steps.appended["input_ids"].shape[1]),
        ]
    )


def _find(cfg: EvalRunConfig, item_id: str) -> list[tuple[str, Sample]]:
    """Every configured benchmark's sample with ``item_id``, in config order."""
    samples: dict[str, list[Sample]] = {}
    for name in sorted(cfg.eval.benchmarks, key=lambda n: BENCHMARKS[n].source is not None):
        bench = BENCHMARKS[name]
        if bench.source is None:
            samples[name] = bench.load(settings_of(bench, cfg.eval))
        elif bench.source in samples:
            samples[name] = bench.derive(samples[bench.source], settings_of(bench, cfg.eval)).samples
    found = [(name, s) for name in cfg.eval.benchmarks for s in samples.get(name, []) if s.id == item_id]
    if not found:
        searched = ", ".join(f"{name} ({len(items)} items)" for name, items in samples.items())
        raise ConfigError(f"show_prompt={item_id!r}: no such item in {searched}")
    return found


def _describe(rendered: Rendered, n_tokens: int) -> str:
    """The text, then each medium's frames and size, then the token count the processor made of it."""
    lines = [rendered.text, ""]
    for video in rendered.videos:
        frames, height, width = video.shape[0], video.shape[1], video.shape[2]
        lines.append(f"video: {frames} frames of {width}x{height}")
    for image in rendered.images:
        lines.append(f"image: {image.shape[1]}x{image.shape[0]}")
    lines.append(f"tokens after the processor: {n_tokens}")
    return "\n".join(lines)
