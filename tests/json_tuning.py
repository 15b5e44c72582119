"""A tiny checkpoint briefly tuned to answer the project's own text-model prompts (the judge's, the QC
blind filter's, question generation's) with replies those callers accept, so their success paths run
against a real server.

The replies are fixed per kind of prompt (what is tested is the path, not the wisdom): a judge score of 1
(valid on both the binary and the 1-10 scale), the class Correction, the option letter A, one question.
The prompts are varied (random case texts, random junk as the judged response, random captions) so the
model replies so to any prompt of these kinds; frames sent with a question prompt come before its text,
far from the end the reply hangs on, so the tuning does without them (the real-server test sends them).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from core.formats.v2p import render_question
from data_builders.questions import build_prompt
from data_builders.sources.captions import Caption
from eval.rubrics import METRICS, judge_prompt

SCORE_REPLY = '{"score": 1}'
CLASS_REPLY = '{"class": "Correction"}'
LETTER_REPLY = "A"
QUESTION, ANSWER = "What moves?", "A circle moves."
QUESTION_REPLY = json.dumps({"question": QUESTION, "answer": ANSWER})
TYPES = ("Cancellation", "False Trigger", "Correction")
_WORDS = (
    "red green blue yellow circle square triangle moves left right up down appears leaves the a "
    "object scene dog man car stops runs stove pan board video seconds what which how many"
).split()


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))


def _junk(rng: random.Random) -> str:
    """Text like an untuned tiny model's answer: random printable characters."""
    characters = [
        chr(rng.randint(33, 126)) if rng.random() > 0.15 else " " for _ in range(rng.randint(0, 60))
    ]
    return "".join(characters)


def judge_item(rng: random.Random) -> dict:
    """A random OVIBench item as ``eval.judge.item_from_record`` makes it (the response: junk or words)."""
    item = {
        "question": _words(rng, 4, 12) + "?",
        "partial_answer": _words(rng, 2, 8),
        "interruption": _words(rng, 2, 8),
        "interruption_type": rng.choice(TYPES),
        "reference_reaction": _words(rng, 3, 10),
        "response": _junk(rng) if rng.random() < 0.6 else _words(rng, 0, 12),
        "answer": _words(rng, 4, 14),
    }
    if rng.random() < 0.3:
        item["visual_evidence"] = _words(rng, 5, 15)
    if rng.random() < 0.7:
        start = rng.uniform(0, 20)
        item.update(question_time=start, interruption_time=start + rng.uniform(0.5, 8), duration=start + 6)
    return item


def blind_question(rng: random.Random) -> str:
    options = [_words(rng, 1, 3) for _ in range(rng.randint(2, 4))]
    return render_question(_words(rng, 4, 10) + "?", options)


def question_prompt(rng: random.Random, n_frames: int) -> str:
    start = round(rng.uniform(0, 30), 1)
    captions = [Caption("v", i, start, start + 3.0, _words(rng, 4, 10)) for i in range(rng.randint(1, 3))]
    return build_prompt(captions, n_frames)


def examples(rng: random.Random) -> list[tuple[str, str]]:
    """A ``(prompt, reply)`` of every kind: a judge score, a judge class, a blind-filter question, and two
    question-generation prompts (0-2 frames; the longest reply, the slowest learnt)."""
    metric = rng.choice([name for name, spec in METRICS.items() if not spec.classes])
    return [
        (judge_prompt(metric, judge_item(rng)), SCORE_REPLY),
        (judge_prompt("ca_open", judge_item(rng)), CLASS_REPLY),
        (blind_question(rng), LETTER_REPLY),
        (question_prompt(rng, rng.randint(0, 2)), QUESTION_REPLY),
        (question_prompt(rng, rng.randint(0, 2)), QUESTION_REPLY),
    ]


def tune_json_replies(
    checkpoint: str | Path, out: str | Path, *, steps: int = 120, lr: float = 3e-3, seed: int = 0
) -> Path:
    """Fine-tune the tiny Qwen-VL ``checkpoint`` to give each prompt of :func:`examples` its reply (loss on
    the reply and the end of its turn) and save it, processor and chat template included, to ``out``.

    Prompts are rendered by the checkpoint's chat template, as the server renders them. Only their last
    :data:`_TRAINED_TAIL` tokens are trained through: the rest is read without gradients into a key/value
    cache (a whole 1,000-token judge prompt through backward costs many times more, and the reply is told
    by how the prompt ends), yet the model learns to reply after the whole prompt, as it will be asked.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(checkpoint)
    tokenizer = processor.tokenizer
    model = AutoModelForImageTextToText.from_pretrained(checkpoint)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        batch = examples(rng)
        for prompt, reply in batch:
            chat = [{"role": "user", "content": prompt}]
            text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            target = tokenizer(reply + "<|im_end|>").input_ids
            (_reply_loss(model, tokenizer(text).input_ids, target) / len(batch)).backward()
        optimizer.step()
        schedule.step()
    model.eval()
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return Path(out)


_TRAINED_TAIL = 48  # prompt tokens trained through: the output format each prompt ends with


def _reply_loss(model, prompt: list[int], reply: list[int]):
    import torch

    head, tail = prompt[:-_TRAINED_TAIL], prompt[-_TRAINED_TAIL:]
    cache = None
    if head:
        with torch.no_grad():
            cache = model(input_ids=torch.tensor([head]), use_cache=True).cache
    input_ids = torch.tensor([tail + reply])
    labels = torch.tensor([[-100] * len(tail) + reply])
    return model(input_ids=input_ids, labels=labels, cache=cache).loss
