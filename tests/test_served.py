"""Evaluation through a model server (models/served.py, models/server_process.py): what is sent is what the
in-process model reads, the server process is started and stopped cleanly, and — against a real
``transformers serve`` — served predictions equal in-process ones where the two engines compute the same."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from paths import REPO

from core.config import ServerConfig, VideoTransport
from core.decoding import MediaSpec
from core.media import FrameCache
from core.sample import Sample
from models.served import ServedModel, sampled_rate, write_lossless_mp4
from models.server_process import ServerError, launched_server


def _needs_a_video_server() -> None:
    """Skip unless ``transformers serve`` can read a video here: its serving extra, and torchcodec with
    FFmpeg's shared libraries (.ci/run installs them; requirements-cpu.txt pins torchcodec)."""
    pytest.importorskip("fastapi", reason="transformers[serving] (the dev extra) is not installed")
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401  (loads FFmpeg's libraries)
    except Exception as err:  # ImportError, or FFmpeg's libraries missing
        pytest.skip(f"transformers serve cannot read videos here (torchcodec with FFmpeg): {err}")


def _decode(path: Path) -> tuple[np.ndarray, Fraction]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        return frames, stream.average_rate


def test_clips_decode_to_the_very_pixels_at_the_sampled_rate(tmp_path):
    frames = np.random.default_rng(0).integers(0, 256, (6, 56, 84, 3), dtype=np.uint8)
    write_lossless_mp4(tmp_path / "clip.mp4", frames, Fraction(3, 2))
    decoded, rate = _decode(tmp_path / "clip.mp4")
    assert np.array_equal(decoded, frames)
    assert rate == Fraction(3, 2)


def _adapter(tiny_checkpoint, tmp_path, media: MediaSpec | None = None):
    from core.config import ModelConfig
    from models.chat import make_adapter
    from models.loading import load_processor

    processor = load_processor(ModelConfig(name_or_path=str(tiny_checkpoint)))
    cache = FrameCache(tmp_path / "frames")
    return make_adapter("qwen2_5_vl", processor, media or MediaSpec(), cache), processor


def _ovi_samples(synthetic_build) -> list[Sample]:
    from eval.benchmarks.ovi import OviSettings, load

    return load(OviSettings(root=str(synthetic_build.ovibench)))


def _spans(sample: Sample) -> int:
    return sum(part.type == "video" for turn in sample.turns for part in turn.parts)


def _served(chat, tmp_path, video=VideoTransport.path) -> ServedModel:
    cfg = ServerConfig(video=video)
    return ServedModel("http://127.0.0.1:9/v1", "tiny", chat, cfg, tmp_path / "clips")


@pytest.mark.parametrize("position_fps", [None, 2.0])
def test_messages_carry_the_adapters_turns_frames_and_rates(
    synthetic_build, tiny_checkpoint, tmp_path, position_fps
):
    """An OVI interruption: system turn, both spans as files of the frames the adapter samples (the
    interruption's clip at its follow-on rate, or at the rate Qwen2.5-VL's positions are to assume),
    parts in the chat format's order."""
    from core.media import span_specs

    chat, _ = _adapter(tiny_checkpoint, tmp_path, MediaSpec(position_fps=position_fps))
    sample = next(s for s in _ovi_samples(synthetic_build) if _spans(s) == 2)
    asked = replace(sample, turns=sample.turns[:-1])
    messages = _served(chat, tmp_path).messages(asked)

    assert messages[0] == {"role": "system", "content": chat.chat.system}
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user"]
    videos = [p for m in messages[1:] for p in m["content"] if p["type"] == "video_url"]
    spans = [p for t in asked.turns for p in t.parts if p.type == "video"]
    specs = span_specs(asked, chat.media, follow_on=chat.follow_on)
    assert len(videos) == len(spans) == 2
    for part, span, spec in zip(videos, spans, specs, strict=True):
        clip = chat.cache.clip(span.path, span.start, span.end, spec)
        frames, rate = _decode(Path(part["video_url"]["url"]))
        assert np.array_equal(frames, clip.frames)
        assert rate == (sampled_rate(clip) if position_fps is None else position_fps)
    texts = [p["text"] for p in messages[1]["content"] if p["type"] == "text"]
    assert texts == [p.text for p in asked.turns[0].parts if p.type == "text"]


def test_inline_transport_sends_the_same_clip_as_a_data_uri(synthetic_build, tiny_checkpoint, tmp_path):
    import base64

    chat, _ = _adapter(tiny_checkpoint, tmp_path)
    sample = _ovi_samples(synthetic_build)[0]
    asked = replace(sample, turns=sample.turns[:1])
    by_path = _served(chat, tmp_path).messages(asked)[1]["content"][0]["video_url"]["url"]
    inline = _served(chat, tmp_path, VideoTransport.inline).messages(asked)[1]["content"][0]["video_url"][
        "url"
    ]
    prefix = "data:video/mp4;base64,"
    assert inline.startswith(prefix)
    assert base64.b64decode(inline[len(prefix) :]) == Path(by_path).read_bytes()


def test_the_servers_processor_reads_what_the_adapter_feeds_the_model(
    synthetic_build, tiny_checkpoint, tmp_path
):
    """The server side of a request, run here: transformers serve's own message conversion and processor
    call (the frames loaded from our file, audio from it too, as it does for these models) give the very
    token ids, pixels, grids and frame timing the in-process adapter gives."""
    _needs_a_video_server()
    import torch
    from transformers.cli.serving.utils import BaseHandler, Modality

    chat, processor = _adapter(tiny_checkpoint, tmp_path)
    sample = next(s for s in _ovi_samples(synthetic_build) if _spans(s) == 2)
    asked = replace(sample, turns=sample.turns[:-1])
    messages = _served(chat, tmp_path).messages(asked)
    served = processor.apply_chat_template(
        BaseHandler.get_processor_inputs_from_messages(messages, Modality.MULTIMODAL),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        load_audio_from_video=True,
        num_frames=None,
        do_sample_frames=False,
    )
    ours = chat.batch([chat.render(sample, for_generation=True)], padding_side="left")
    for key in ("input_ids", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
        assert torch.equal(torch.as_tensor(served[key]), torch.as_tensor(ours[key])), key


_HEALTHY = textwrap.dedent(
    """
    import http.server, sys
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
    print("serving", sys.argv[1], sys.argv[3], flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
    """
)


def test_a_launched_server_is_waited_for_and_stopped(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(_HEALTHY)
    log = tmp_path / "server.log"
    command = f"{sys.executable} {script} {{model}} {{port}} '{{\"json\": {{}}}}'"  # braces pass through
    with launched_server(command, "some model", log, 30) as url:
        port = int(url.split(":")[-1].split("/")[0])
        assert url == f"http://127.0.0.1:{port}/v1"
        import urllib.request

        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status == 200
    assert 'serving some model {"json": {}}' in log.read_text()
    import urllib.error

    with pytest.raises(urllib.error.URLError):  # stopped
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)


def test_a_launched_server_dies_with_a_launcher_killed_outright(tmp_path):
    """SIGKILL leaves the launcher no time to stop its server (which has a session of its own): the server
    still goes, instead of holding its port and memory."""
    import signal
    import subprocess

    script = tmp_path / "server.py"
    script.write_text(_HEALTHY)
    launcher = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from models.server_process import launched_server
        command = "{sys.executable} {script} {{model}} {{port}} x"
        with launched_server(command, "m", Path({str(tmp_path / "server.log")!r}), 30):
            print("up", flush=True)
            time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert parent.stdout.readline().strip() == "up"
    servers = _children(parent.pid)
    assert servers, "the launcher started no server"
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(map(_running, servers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_running, servers)), "the server outlived its launcher"


def _running(pid: int) -> bool:
    """Whether a process exists and has not exited (a zombie waits only to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """The ids of a process's children (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_server_that_dies_is_reported_with_its_log(tmp_path):
    command = f"{sys.executable} -c \"import sys; print('no GPU for {{model}}'); sys.exit(3)\""
    with pytest.raises(ServerError, match=r"exited with code 3:\n.*no GPU for m1"):
        with launched_server(command, "m1", tmp_path / "server.log", 30):
            pass


# -- against a real transformers serve -------------------------------------------------------------


def _transformers_serve() -> str:
    serve = f"{sys.executable} -m transformers.cli.transformers serve"
    return serve + " {model} --device cpu --host 127.0.0.1 --port {port}"


def _both_ways(small_eval_config, tmp_path: Path, monkeypatch, overrides: tuple[str, ...]):
    """Evaluate in process (with transformers' video positions, as transformers serve places them) and
    through transformers serve; returns both configs and the served run's summary."""
    import models.loading
    from eval.run import run

    in_process = small_eval_config(tmp_path, "run_name=in_process", *overrides)
    with monkeypatch.context() as patched:
        patched.setattr(models.loading, "use_released_positions", lambda model: False)
        run(in_process)
    served = small_eval_config(tmp_path, "run_name=served", *overrides)
    served.eval.server.command = _transformers_serve()
    served.eval.server.video = VideoTransport.path
    return in_process, served, run(served)


def _records(run_dir: Path, bench: str) -> dict[str, dict]:
    lines = (run_dir / "eval" / "model" / f"{bench}.jsonl").read_text().splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


@pytest.mark.slow
def test_served_predictions_equal_in_process_ones(
    small_eval_config, synthetic_build, tiny_checkpoint, tmp_path, monkeypatch
):
    """python -m eval through transformers serve on the tiny model: every V2P and multiple-choice OVI
    prediction equals the in-process one, once both use the same multimodal positions (transformers serve
    uses the library's; in process we use the released ones, as vLLM does: see models/rope.py). The
    simulated items' reactions are compared and their agreement reported, not required: the served answer
    goes back as text, which a random model's broken UTF-8 does not survive."""
    _needs_a_video_server()

    overrides = (
        f"model.name_or_path={tiny_checkpoint}",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        f"eval.settings.ovi.root={synthetic_build.ovibench}",
        "eval.limit=6",
        "eval.batch_size=1",
        "logger.wandb=false",
        "eval.benchmarks=[v2p,ovi,ovi_pairs]",
        f"eval.settings.ovi_pairs.root={synthetic_build.ovibench}",
    )
    in_process, served, summary = _both_ways(small_eval_config, tmp_path, monkeypatch, overrides)
    # Held-out pairs need the model's own log-probabilities: scored in process, named as not scored served.
    scored = json.loads((Path(in_process.run_dir) / "summary.json").read_text())["benchmarks"]["ovi_pairs"]
    assert scored["metrics"]["accuracy"]["n"] == scored["n_items"] == 6 and "not_scored" not in scored
    pairs = summary["benchmarks"]["ovi_pairs"]
    assert "log-probabilities" in pairs["not_scored"] and not pairs["metrics"]
    assert not (Path(served.run_dir) / "eval/model/ovi_pairs.jsonl").exists()

    agreement = {}
    for bench in ("v2p", "ovi"):
        mine, theirs = _records(Path(in_process.run_dir), bench), _records(Path(served.run_dir), bench)
        assert mine.keys() == theirs.keys() and mine
        for protocol in ("teacher_forced", "simulated"):
            ids = [i for i in mine if mine[i]["protocol"] == protocol]
            same = [i for i in ids if mine[i]["prediction"] == theirs[i]["prediction"]]
            agreement[f"{bench} {protocol}"] = f"{len(same)}/{len(ids)}"
            if protocol == "teacher_forced":
                assert same == ids, (bench, [(mine[i]["prediction"], theirs[i]["prediction"]) for i in ids])
        assert all(mine[i]["setting"] != theirs[i]["setting"] for i in mine), "served is its own setting"
    print("served vs in-process agreement:", agreement)
    assert summary["benchmarks"]["v2p"]["n_items"] == 6
    assert (Path(served.run_dir) / "eval" / "server.log").exists()


def _lora_checkpoint(tiny_checkpoint: Path, out: Path) -> Path:
    """A LoRA adapter with random (non-zero) weights on the language model and the vision tower."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint)
    targets = r".*(language_model.*\.(q_proj|v_proj)|visual.*\.qkv)"
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=targets, init_lora_weights=False))
    lora.save_pretrained(out)
    return out


@pytest.mark.slow
def test_a_lora_checkpoint_is_merged_and_served(
    small_eval_config, synthetic_build, tiny_checkpoint, tmp_path, monkeypatch
):
    """checkpoint= through a launched server: the adapter (vision tower included) is merged into its base
    for the server, and the served predictions equal the in-process ones of the checkpoint."""
    _needs_a_video_server()

    checkpoint = _lora_checkpoint(tiny_checkpoint, tmp_path / "run" / "checkpoints" / "checkpoint-1")
    overrides = (
        f"model.name_or_path={tiny_checkpoint}",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        "eval.benchmarks=[v2p]",
        "eval.limit=4",
        "eval.batch_size=1",
        "logger.wandb=false",
        f"checkpoint={checkpoint}",
    )
    in_process, served, _ = _both_ways(small_eval_config, tmp_path, monkeypatch, overrides)

    merged = Path(served.run_dir) / "eval" / "served_weights" / "checkpoint-1"
    assert (merged / "config.json").exists() and (merged / "chat_template.jinja").exists()
    name = "checkpoint-1"
    mine = (Path(in_process.run_dir) / "eval" / name / "v2p.jsonl").read_text().splitlines()
    theirs = (Path(served.run_dir) / "eval" / name / "v2p.jsonl").read_text().splitlines()
    # transformers serve parses a Qwen reply with its response template, which drops the reply's leading
    # whitespace (docs/serving.md): a random model's first token " qu" comes back as "qu".
    mine = {r["id"]: r["prediction"].lstrip() for r in map(json.loads, mine)}
    theirs = {r["id"]: r["prediction"] for r in map(json.loads, theirs)}
    assert mine == theirs and len(mine) == 4
    from safetensors.torch import load_file

    base, tuned = load_file(tiny_checkpoint / "model.safetensors"), load_file(merged / "model.safetensors")
    changed = {key.split(".")[0] for key in base if not base[key].equal(tuned[key])}
    assert changed == {"model", "visual"}  # the vision tower's adapter was merged too


def test_a_running_server_cannot_stand_for_a_checkpoint(
    small_eval_config, synthetic_build, tiny_checkpoint, tmp_path
):
    from core.errors import ConfigError
    from eval.run import run

    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    cfg = small_eval_config(
        tmp_path,
        f"model.name_or_path={tiny_checkpoint}",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        "eval.benchmarks=[v2p]",
        "eval.limit=1",
        "logger.wandb=false",
        f"checkpoint={checkpoint}",
        "eval.server.endpoint.base_url=http://127.0.0.1:9/v1",
    )
    with pytest.raises(ConfigError, match="give eval.server.command"):
        run(cfg)


def test_a_training_refuses_to_evaluate_inline_through_a_server(small_train_config, tmp_path):
    from core.errors import ConfigError
    from core.run import Run
    from core.rundir import RunDir
    from train.recipe import _inline_evaluation

    cfg = small_train_config(tmp_path, "eval.server.command='vllm serve {model} --port {port}'")
    with pytest.raises(ConfigError, match="eval.mode=async"):
        _inline_evaluation(Run(cfg, RunDir(tmp_path / "run")), None, None)


def _key(message: dict) -> str:
    return hashlib.sha1(json.dumps(message, sort_keys=True).encode()).hexdigest()[:8]


def _reply(content: str, finish_reason: str) -> bytes:
    choice = {"message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
    return json.dumps({"choices": [choice]}).encode()


@pytest.mark.parametrize("finish_reason", ["length", "stop"])
def test_a_simulation_is_two_requests_cut_at_the_interruption(
    chat_server, synthetic_build, tiny_checkpoint, tmp_path, finish_reason
):
    """The answer is asked for with the interruption point's token count as its limit, and whether it
    ended first comes from finish_reason; the reaction is asked with that answer as the assistant turn."""
    from core.config import OviProtocol
    from models.ovi_simulation import interruption_cut

    chat, _ = _adapter(tiny_checkpoint, tmp_path)
    served = ServedModel(
        "http://127.0.0.1:9/v1", "tiny", chat, ServerConfig(video=VideoTransport.path), tmp_path
    )
    by_question = {
        _key(served.messages(replace(s, turns=s.turns[:1]))[1]): s for s in _ovi_samples(synthetic_build)
    }
    samples = [s for s in by_question.values() if _spans(s) == 2][:3]  # each asks its own question
    assert len(samples) == 3
    bodies = []

    def respond(handler, body):
        with server.lock:
            bodies.append(body)
        answering = len(body["messages"]) == 2
        key = _key(body["messages"][1])
        return 200, _reply(f"answer {key}" if answering else f"reaction {key}", finish_reason)

    server = chat_server(respond)
    served = ServedModel(
        server.url, "tiny", chat, ServerConfig(video=VideoTransport.path), tmp_path / "clips"
    )
    served.workers = 4
    results = served.generate(samples, OviProtocol.simulated, max_new_tokens=7)

    assert len(bodies) == 2 * len(samples)
    for sample, result in zip(samples, results, strict=True):
        key = _key(served.messages(replace(sample, turns=sample.turns[:1]))[1])
        assert result["truncated_answer"] == f"answer {key}"
        assert result["prediction"] == f"reaction {key}"  # in order, whatever the threads did
        assert result["simulation"]["answer_finished"] is (finish_reason == "stop")
        first, second = (b for b in bodies if _key(b["messages"][1]) == key)
        assert first["max_tokens"] == result["simulation"]["cut_tokens"] == interruption_cut(sample)
        assert second["max_tokens"] == 7
        assert second["messages"][2] == {
            "role": "assistant",
            "content": [{"type": "text", "text": f"answer {key}"}],
        }
        assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
        assert first["chat_template_kwargs"] == {"num_frames": None, "do_sample_frames": False}


def test_a_full_checkpoint_is_served_from_links_beside_the_processor(tiny_checkpoint, tmp_path):
    """The training's files are linked, never written through: the processor's own files are new."""
    from core.config import ModelConfig
    from models.loading import load_processor
    from models.served import served_weights

    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-7"
    checkpoint.mkdir(parents=True)
    for name, text in (("config.json", "{}"), ("model.safetensors", "weights"), ("tokenizer.json", "old")):
        (checkpoint / name).write_text(text)
    cfg = ModelConfig(name_or_path=str(tiny_checkpoint))
    out = served_weights(cfg, checkpoint, load_processor(cfg), tmp_path / "served")

    assert out == tmp_path / "served" / "checkpoint-7"
    assert (out / "model.safetensors").resolve() == (checkpoint / "model.safetensors").resolve()
    assert (out / "chat_template.jinja").is_file() and not (out / "tokenizer.json").is_symlink()
    assert (checkpoint / "tokenizer.json").read_text() == "old"
    assert served_weights(cfg, None, None, tmp_path / "served") == tiny_checkpoint
