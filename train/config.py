"""Typed configuration for ``python -m train`` and ``python -m eval``.

The dataclasses are registered with Hydra's ConfigStore as the schema behind ``conf/``, so a
misspelt key or a value of the wrong type fails when the config is composed, naming the key.
This module imports no torch, so ``launch/`` can read configs cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from hydra.core.config_store import ConfigStore

from data_builders.build import SyntheticDataConfig
from data_builders.media import MediaSpec


@dataclass
class ModelConfig:
    """Which checkpoint to fine-tune and how to load it."""

    name_or_path: str = "???"  # hub name or local checkpoint directory
    family: str = "qwen2_5_vl"  # qwen2_vl | qwen2_5_vl | qwen3_vl | llava_onevision | internvl
    tiny: bool = False  # build a tiny random model of `family` at name_or_path if absent (tests, quickstart)
    dtype: str = "auto"  # auto: bf16 on GPUs that have it, else fp32
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False  # never run a checkpoint's own code unless asked to
    allow_download: bool = False  # only local dirs and the local hub cache unless set


class PeftMethod(Enum):
    """How the model is fine-tuned (``peft=lora|full|qlora``)."""

    lora = "lora"  # LoRA adapters on target_modules; modules_to_save trained fully; the rest frozen
    full = "full"  # every parameter outside the frozen towers
    qlora = "qlora"  # LoRA on a 4-bit NF4 base (bitsandbytes; CUDA GPUs only, see train/qlora.py)


class Tower(Enum):
    """The three parts of a VLM (train/towers.py says which parameters belong to which, per family)."""

    vision = "vision"  # the vision encoder
    projector = "projector"  # vision features into the language model's space (Qwen-VL: the mergers)
    language_model = "language_model"  # decoder, embeddings and lm_head


@dataclass
class PeftConfig:
    """Which parameters train. ``lora``/``qlora`` adapt ``target_modules`` (a regex over module names)
    and fully train ``modules_to_save``; ``full`` trains every parameter outside the ``freeze`` towers.
    Under LoRA the targets decide, and a frozen tower that they would train is an error at start."""

    method: PeftMethod = PeftMethod.lora
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
    modules_to_save: list[str] = field(default_factory=list)
    freeze: list[Tower] = field(default_factory=lambda: [Tower.vision])


@dataclass
class DataConfig:
    """Training data: HF datasets on disk (built by ``data_builders``), mixed by concatenation."""

    train: list[str] = field(default_factory=list)  # dataset directories (datasets.load_from_disk)
    synthetic: SyntheticDataConfig = field(default_factory=SyntheticDataConfig)
    build_synthetic: bool = False  # build the synthetic world and its datasets before training
    frame_cache: str | None = "${output_root}/frame_cache"  # decoded frames per (video, media spec)


@dataclass
class TrainerConfig:
    """The optimisation loop (HF Trainer arguments that matter here)."""

    max_steps: int = 100
    batch_size: int = 8  # per device
    grad_accum: int = 1
    lr: float = 2e-4  # the language model's (and every tower's without a learning rate of its own)
    lr_vision: float | None = None  # the vision tower's learning rate; null: lr
    lr_projector: float | None = None  # the projector's learning rate; null: lr
    weight_decay: float = 0.0
    warmup_ratio: float = 0.03
    lr_scheduler: str = "cosine"
    save_steps: int = 50  # every save is evaluated on both benchmarks
    logging_steps: int = 10
    num_workers: int = 0  # dataloader worker processes (decoding + processing)
    gradient_checkpointing: bool = False
    seed: int = 0
    # DeepSpeed ZeRO stage (2 or 3; null: plain DDP or one process). train/deepspeed.py derives the
    # DeepSpeed config from these fields, so there is no JSON to keep in step (trainer=zero2|zero3|…).
    zero: int | None = None
    offload: bool = False  # optimizer state and step on the CPU (ZeRO-Offload; needs zero)


# When a training's baseline and checkpoints are evaluated. inline: by the training itself, before step 1
# and after every save | async: not by the training; `python -m eval.watch <run_dir>` evaluates each
# checkpoint as it lands (on a spare GPU or another node) and logs to the same W&B run.
# (Declared by name: `async` is a Python keyword, so `EvalMode["async"]` in code.)
EvalMode = Enum("EvalMode", [("inline", "inline"), ("async", "async")])


@dataclass
class EvalConfig:
    """Benchmarks run on the untuned baseline and after every checkpoint save."""

    benchmarks: list[str] = field(default_factory=lambda: ["v2p", "ovi"])
    v2p_root: str | None = None  # a V2P-Bench release directory (dataset_info.jsonl, videos/, frames/)
    ovi_root: str | None = None  # an OVIBench directory (ovibench.jsonl, videos/)
    input_order: str = "official"  # official: video, question, VP frame | vp_first: video, VP frame, question
    limit: int | None = None  # evaluate only the first N items of each benchmark
    batch_size: int = 16
    max_new_tokens: int = 16  # multiple-choice answers ("B (Correction)") and V2P letters
    max_new_tokens_open: int = 128  # open-ended OVIBench reactions (batched apart, so MCQ batches stay short)
    # Open-ended OVIBench items: teacher_forced (the dataset's partial answer is given) | simulated (the
    # model's own answer, cut at interruption_time at 3 tokens/s, then the interruption turn continued from
    # the key/value cache: eval/ovi_simulation.py). Multiple-choice items are the same under both.
    ovi_protocol: str = "teacher_forced"
    bootstrap_resamples: int = 2000
    mode: EvalMode = EvalMode.inline  # who evaluates a training's baseline and checkpoints, and when
    # Results shared across runs and paths, by weights and settings fingerprint (eval/results_cache.py);
    # conf/eval puts it under output_root. null: each run keeps only its own results.
    results_cache: str | None = None
    # V2P hack diagnostics, each run as one more benchmark (eval/diagnostics.py): blind, z_option,
    # shuffled, hack_ratio (the same inputs as shuffled), text_prompt. Needs v2p in benchmarks.
    diagnostics: list[str] = field(default_factory=list)
    diagnostics_seed: int = 0  # the shuffled video-question pairing


@dataclass
class JudgeConfig:
    """The LLM judge of open-ended OVIBench items (``eval.judge``). ``backend: none`` leaves them unscored.

    The API key is read at request time from the environment variable named by ``api_key_env``; it is
    never part of a config, a log or W&B.
    """

    backend: str = "none"  # none | openai (any OpenAI-compatible /chat/completions server) | hf (local model)
    base_url: str | None = None  # openai: e.g. http://localhost:8000/v1
    model: str | None = None  # openai: the served model name; pin an exact version
    api_key_env: str = "OPENAI_API_KEY"  # unset in the environment: no Authorization header (local vLLM)
    timeout_s: float = 60.0
    max_retries: int = 3  # after the first try; timeouts, connection errors, HTTP 429 and 5xx only
    backoff_s: float = 1.0  # doubled on every further retry
    max_tokens: int = 256
    workers: int = 8  # openai: requests in flight at once (hf judges one at a time)
    hf_model: str | None = None  # hf: a local directory or a name in the local hub cache
    hf_max_new_tokens: int = 256
    # Judgements by (judge, rubric version, metric, prompt): a resumed or repeated evaluation costs nothing.
    # null keeps them in memory only.
    cache: str | None = "${run_dir}/eval/judge_cache.jsonl"
    metrics: list[str] | None = None  # judge only these (iac, ifa, tfs, ves, cfs, ccs); null: all that apply


@dataclass
class LoggerConfig:
    """Weights & Biases. ``mode: auto`` is online when WANDB_API_KEY is set, else offline."""

    wandb: bool = True
    project: str = "vlm-interact"
    entity: str | None = None
    mode: str = "auto"  # auto | online | offline | disabled


@dataclass
class TrainConfig:
    """A training run: everything it reads, so ``--cfg job`` prints the whole experiment."""

    model: ModelConfig = field(default_factory=ModelConfig)
    peft: PeftConfig = field(default_factory=PeftConfig)
    media: MediaSpec = field(default_factory=MediaSpec)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    run_name: str = "dev"
    output_root: str = "outputs"
    run_dir: str = "${output_root}/${run_name}"


@dataclass
class EvalRunConfig:
    """A standalone evaluation (``python -m eval``) of one model or checkpoint directory."""

    model: ModelConfig = field(default_factory=ModelConfig)
    adapter: str | None = None  # a LoRA adapter directory to apply on top of model (a training checkpoint)
    score_file: str | None = None  # score a V2P response file (release rows + response, model); no model runs
    media: MediaSpec = field(default_factory=MediaSpec)
    eval: EvalConfig = field(default_factory=EvalConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    logger: LoggerConfig = field(default_factory=lambda: LoggerConfig(wandb=False))
    data: DataConfig = field(default_factory=DataConfig)
    run_name: str = "eval"
    output_root: str = "outputs"
    run_dir: str = "${output_root}/${run_name}"


def register_configs() -> None:
    """Register the schemas that ``conf/train.yaml`` and ``conf/eval.yaml`` extend."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="eval_schema", node=EvalRunConfig)
