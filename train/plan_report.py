"""A plan (train/plan.py) as text: ``plan.md`` and the lines ``python -m train ... plan=true`` prints."""

from __future__ import annotations

GIB = 1024**3


def gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def plan_headline(plan) -> str:
    """The few lines printed when a plan ends."""
    p = plan.parameters
    lines = [
        f"plan of {plan.model['name_or_path']} ({plan.model['family']}, {plan.stage}), "
        f"{plan.world_size} GPU(s) of {plan.gpu_gib:g} GiB:",
        f"  parameters: {p['base']:,} in the checkpoint; {p['trainable']:,} trained",
        f"  per GPU: {gib(plan.total_bytes)} -> {plan.verdict}",
    ]
    for term in plan.terms[:3]:
        shrink = f" (shrink: {term['shrink'][0]})" if term["shrink"] else ""
        lines.append(f"    {term['term']}: {gib(term['bytes'])}{shrink}")
    lines.append(f"  planned in {plan.seconds:.0f} s; plan.md and plan.json in {plan.run_dir}")
    return "\n".join(lines)


def plan_markdown(plan) -> str:
    """``plan.md``: the verdict and its terms, parameters per tower, tokens per set, activations measured."""
    p = plan.parameters
    out = [
        f"# Plan: {plan.model['name_or_path']}",
        "",
        f"**{plan.verdict}**: {gib(plan.total_bytes)} per GPU of {plan.gpu_gib:g} GiB "
        f"({plan.world_size} GPU(s), stage {plan.stage}). "
        "`fits` within 90% of the GPU (the rest is the allocator's fragmentation), `tight` up to 100%.",
        "",
        "| per GPU | GiB | what would shrink it |",
        "|---|---|---|",
    ]
    for term in plan.terms:
        out.append(f"| {term['term']} | {term['bytes'] / GIB:.2f} | {'; '.join(term['shrink']) or '—'} |")
    out += ["", f"Model states: {plan.model_states['formula']}.", "", "## Parameters", ""]
    out += [f"{p['base']:,} in the checkpoint, {p['total']:,} as trained ({p['trainable']:,} trainable).", ""]
    out.append("| tower | parameters | trainable |")
    out.append("|---|---|---|")
    for tower, counts in p["towers"].items():
        out.append(f"| {tower} | {counts['parameters']:,} | {counts['trainable']:,} |")
    out += [
        "",
        "## Tokens per sample",
        "",
        "| set | samples | min | p50 | p95 | max | visual p95 | labelled p95 |",
    ]
    out.append("|---|---|---|---|---|---|---|---|")
    for name, record in plan.tokens.items():
        if name == "worst_case":
            continue
        t = record["total"]
        if not t:
            out.append(f"| {name} | 0 | | | | | | |")
            continue
        out.append(
            f"| {name} | {record['samples']} | {t['min']} | {t['p50']} | {t['p95']} | {t['max']} "
            f"| {record['visual']['p95']} | {record['labelled']['p95']} |"
        )
    worst = plan.tokens["worst_case"]
    worst_total = sum(worst["video"]) + sum(worst["images"]) + worst["text"]
    out.append(f"| worst case by the media limits | | | | | {worst_total} | | |")
    for name, record in plan.tokens.items():
        if name != "worst_case" and record.get("unreadable"):
            unreadable, left_out = len(record["unreadable"]), record["samples_left_out"]
            out += ["", f"{name}: {unreadable} unreadable file(s), {left_out} samples left out:"]
            out += [f"- {path}: {why}" for path, why in list(record["unreadable"].items())[:20]]
    out += ["", "## Activations of one micro-batch (measured on the meta device)", ""]
    out += [
        "| sample | tokens | sequences | checkpointing | peak GiB | saved GiB |",
        "|---|---|---|---|---|---|",
    ]
    for a in plan.activations:
        out.append(
            f"| {a.sample} | {a.tokens} | {a.sequences} | {'on' if a.gradient_checkpointing else 'off'} "
            f"| {a.peak_bytes / GIB:.2f} | {a.saved_bytes / GIB:.2f} |"
        )
    approximations = sorted({note for a in plan.activations for note in a.approximations})
    out += ["", "## Notes", ""] + [f"- {note}" for note in [*plan.notes, *approximations]]
    out += ["", f"Planned in {plan.seconds:.1f} s, offline, no weights read.", ""]
    return "\n".join(out)
