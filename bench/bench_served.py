"""Served evaluation against in-process evaluation: items/s of the same model on the same V2P items.

In process: the evaluation's own ``generate`` in batches of 16 (its default). Served: the evaluation's
``ServedModel`` against a server started for the run, with 1 and 8 requests in flight (clips written once
before timing, as a second checkpoint's evaluation finds them). Also prints how many served predictions
equal the in-process ones (``transformers serve`` computes Qwen2.5-VL's video positions as transformers
does, the in-process model as the checkpoints were released: see models/rope.py).

    python bench/bench_served.py                         # transformers serve, in this environment
    python bench/bench_served.py --checkpoint TINY_HEAD32 --video inline --command \
        "VENV/bin/python -m vllm.entrypoints.openai.api_server --model {model} --port {port} --dtype float32 \
         --max-model-len 4096 --media-io-kwargs '{\"video\": {\"num_frames\": -1}}'"    # vLLM's CPU build

(vLLM's CPU attention needs a head size of at least 32, which the tiny checkpoints do not have:
docs/serving.md says how the head-32 variant and vLLM's environment were made.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from common import BENCH_ROOT, print_table, quickstart_run, timed, v2p_items

from core.config import OviProtocol, ServerConfig, VideoTransport
from core.media import FrameCache
from core.text_models import EndpointConfig
from eval.predictor import InProcess
from models.chat import make_adapter
from models.loading import load_model
from models.served import ServedModel
from models.server_process import launched_server

ITEMS = 32
BATCH = 16
REPEATS = 2  # timed passes per setting; the fastest counts
TRANSFORMERS_SERVE = (
    f"{sys.executable} -m transformers.cli.transformers serve {{model}} --device cpu --port {{port}}"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--command", default=TRANSFORMERS_SERVE, help="server command ({model}, {port})")
    parser.add_argument("--video", default="path", choices=[v.value for v in VideoTransport])
    parser.add_argument("--checkpoint", help="a Qwen2.5-VL checkpoint (default: the quickstart's tiny one)")
    args = parser.parse_args()

    run = quickstart_run(
        *([f"model.name_or_path={args.checkpoint}", "model.tiny=false"] if args.checkpoint else [])
    )
    cfg = run.cfg
    cache = FrameCache(cfg.data.frame_cache)
    items, settings = v2p_items(run, ITEMS, cache)
    model, processor = load_model(cfg.model)
    model.eval()
    chat = make_adapter(cfg.model.family, processor, cfg.media, cache, cfg.model.chat_format)
    length = settings.max_new_tokens
    protocol = OviProtocol.teacher_forced

    in_process = InProcess(model, chat)

    def run_in_process() -> list[str]:
        with torch.no_grad():
            out = []
            for start in range(0, len(items), BATCH):
                out += [
                    f["prediction"]
                    for f in in_process.generate(items[start : start + BATCH], protocol, length)
                ]
            return out

    reference = run_in_process()  # warm-up
    library = library_positions_answers(cfg, chat, items, length)
    rates = {"in process, batch 16": ITEMS / min(timed(run_in_process) for _ in range(REPEATS))}
    agreement = {}
    log = BENCH_ROOT / "served" / "server.log"
    with launched_server(args.command, cfg.model.name_or_path, log, startup_timeout_s=900) as base_url:
        for workers in (1, 8):
            server = ServerConfig(
                endpoint=EndpointConfig(workers=workers, timeout_s=600), video=VideoTransport(args.video)
            )
            served = ServedModel(
                base_url, cfg.model.name_or_path, chat, server, BENCH_ROOT / "served" / "clips"
            )
            answers = [f["prediction"] for f in served.generate(items, protocol, length)]  # warm-up, clips
            agreement[workers] = [same(answers, reference), same(answers, library)]
            best = min(
                timed(lambda served=served: served.generate(items, protocol, length)) for _ in range(REPEATS)
            )
            rates[f"served, {workers} in flight"] = ITEMS / best
    base = rates["in process, batch 16"]
    rows = [[name, f"{rate:.1f}", f"{rate / base:.2f}"] for name, rate in rates.items()]
    print_table(
        f"Served vs in-process evaluation: {ITEMS} V2P items, tiny Qwen2.5-VL, greedy, up to {length} new "
        f"tokens, fastest of {REPEATS} passes",
        ["engine", "items/s", "x in process"],
        rows,
        notes=[
            f"server: {' '.join(Path(w).name for w in args.command.split()[:4])} ...; video as {args.video}",
            "served predictions equal to in-process ones with the released | transformers' video positions, "
            "exactly (ignoring U+FFFD): "
            + ", ".join(f"{a} | {b} ({w} in flight)" for w, (a, b) in agreement.items()),
            "U+FFFD: a random model emits byte pieces that are no UTF-8; vLLM's streaming detokenizer holds "
            "such pieces back where transformers writes U+FFFD",
        ],
    )


def same(answers: list[str], reference: list[str]) -> str:
    """How many answers equal the reference exactly, and ignoring U+FFFD (``n (m)/total``)."""
    exact = sum(a == b for a, b in zip(answers, reference, strict=True))
    clean = sum(
        a.replace("\ufffd", "") == b.replace("\ufffd", "") for a, b in zip(answers, reference, strict=True)
    )
    return f"{exact} ({clean})/{len(reference)}"


def library_positions_answers(cfg, chat, items, length: int) -> list[str]:
    """The in-process answers of the same weights with transformers' own video positions (as transformers
    serve computes them) instead of the released ones."""
    import models.loading

    released = models.loading.use_released_positions
    models.loading.use_released_positions = lambda model: False
    try:
        model, _ = load_model(cfg.model)
    finally:
        models.loading.use_released_positions = released
    model.eval()
    with torch.no_grad():
        engine = InProcess(model, chat)
        protocol = OviProtocol.teacher_forced
        return [
            f["prediction"]
            for s in range(0, len(items), BATCH)
            for f in engine.generate(items[s : s + BATCH], protocol, length)
        ]


if __name__ == "__main__":
    main()
