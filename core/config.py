"""The typed configuration of a run: ``python -m train`` (``TrainConfig``) and ``python -m eval``
(``EvalRunConfig``), both a ``RunConfig``.

The dataclasses are registered with Hydra's ConfigStore as the schema behind ``conf/``, so a misspelt
key, a value of the wrong type or an unknown choice fails when the config is composed, naming the key.
Each default lives here, documented beside its field, except the settings a floor above owns: each
benchmark's (``eval.settings.<name>``, beside its benchmark) and each stage's (``stage.preference``,
``stage.grpo``, beside its stage), typed when :func:`register_configs` is handed their dataclasses.
``conf/`` files set only what differs. This module imports no torch, so ``launch/`` can read configs
cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from core.choice import Choice
from core.decoding import MediaSpec
from core.text_models import EndpointConfig, TextModelConfig
from core.vocab import PAPER_MIX, InterruptionType, PromptShape


class Family(Choice):
    """A model family: its checkpoints' ``model_type``, which picks the chat format and tower map."""

    qwen2_vl = "qwen2_vl"
    qwen2_5_vl = "qwen2_5_vl"
    qwen3_vl = "qwen3_vl"
    llava_onevision = "llava_onevision"
    internvl = "internvl"


# Each family's system turn, as its chat format writes it (models/chat.py; the exports write the same, so a
# model sees one prompt whichever tool trains it): Qwen3-VL and InternVL have none.
QWEN_SYSTEM_PROMPT = "You are a helpful assistant."
SYSTEM_PROMPTS: dict[str, str | None] = {
    Family.qwen2_vl: QWEN_SYSTEM_PROMPT,
    Family.qwen2_5_vl: QWEN_SYSTEM_PROMPT,
    Family.qwen3_vl: None,
    Family.llava_onevision: QWEN_SYSTEM_PROMPT,  # the ChatML "qwen_1_5" format it was trained with
    Family.internvl: None,
}


class ChatFormatVariant(Choice):
    """Which prompt format a model is trained and scored with (models/chat.py renders both). They differ for
    llava_onevision only: the other families' released chat templates give the model the same inputs."""

    trained = "trained"  # the format the weights were trained with (the lmms-eval convention)
    released = "released"  # the checkpoint's released HF chat template


class Dtype(Choice):
    """The weights' dtype when loaded. auto: bf16 on GPUs that have it, else fp32."""

    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class TinyWords(Choice):
    """The wording a tiny model's offline tokenizer learns as whole words (models/tiny.py); anything else
    still tokenises, byte by byte."""

    benchmarks = "benchmarks"  # the benchmarks' and the builders' wording: the test models
    benchmarks_and_skills = "benchmarks_and_skills"  # and the generic skills': the stand-in


@dataclass
class ModelConfig:
    """Which checkpoint to fine-tune or evaluate, and how to load it."""

    name_or_path: str = "???"  # hub name or local checkpoint directory
    family: Family = Family.qwen2_5_vl  # must be the checkpoint's own model_type (checked at load)
    chat_format: ChatFormatVariant = ChatFormatVariant.trained  # trained | released (the HF chat template)
    tiny: bool = False  # build a tiny random model of `family` at name_or_path if absent (tests, standin)
    tiny_hidden: int = 128  # the tiny model's hidden size and decoder layers (the stand-in's: 192 and 4)
    tiny_layers: int = 2
    tiny_head_dim: int = 16  # hidden / head_dim attention heads (the stand-in's: 4 of 48)
    tiny_words: TinyWords = TinyWords.benchmarks
    # centre the tiny model's visual output on the first training clips when it is built (models/centring.py;
    # the stand-in: a random tower's output is nearly one vector)
    tiny_centre_visual: bool = False
    dtype: Dtype = Dtype.auto
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False  # never run a checkpoint's own code unless asked to
    allow_download: bool = False  # only local dirs and the local hub cache unless set


class PeftMethod(Enum):
    """How the model is fine-tuned (``peft=lora|full|qlora``)."""

    lora = "lora"  # LoRA adapters on target_modules; modules_to_save trained fully; the rest frozen
    full = "full"  # every parameter outside the frozen towers
    qlora = "qlora"  # LoRA on a 4-bit NF4 base (bitsandbytes; CUDA GPUs only, see models/qlora.py)


class Tower(Enum):
    """The three parts of a VLM (models/towers.py says which parameters belong to which, per family)."""

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
class SyntheticDataConfig:
    """The synthetic world and its derived datasets (used by the quickstart and the tests; built by
    ``data_builders.build``)."""

    root: str = "${output_root}/data/synthetic"  # outputs/data/synthetic by default, for the quickstart too
    seed: int = 0  # the training world's seed; the evaluation world's is seed + 1
    train_videos: int = 240  # videos of the training world (V2P SFT, OVI-Train)
    eval_videos: int = 24  # videos of the evaluation world (the V2P-Bench and OVIBench twins)
    vp_questions_per_video: int = 6  # visual-prompt questions wanted per video
    shapes: list[PromptShape] = field(default_factory=lambda: list(PromptShape))  # drawn from: all 8
    # OVI-Train's interruption types, weighted (the paper's 1 : 2 : 1); a type left out weighs 0
    ovi_mix: dict[InterruptionType, int] = field(default_factory=lambda: dict(PAPER_MIX))


@dataclass
class SkillsDataConfig:
    """The generic-skills worlds (``data_builders/generic_skills.py``): the stand-in base model's pretraining
    set and its held-out questions, on videos of their own seeds, apart from the benchmark twins' worlds."""

    root: str = "${output_root}/data/skills"
    seed: int = 50  # the training world's seed; the held-out world's is seed + 1
    train_videos: int = 600
    heldout_videos: int = 60


@dataclass
class DataConfig:
    """Training data: HF datasets on disk (built by ``data_builders``), mixed by concatenation, or by
    ``weights`` (train/data.py ``mix_datasets``: every sample at most once, in the weights' proportions)."""

    train: list[str] = field(default_factory=list)  # dataset directories (datasets.load_from_disk)
    # one non-negative weight per `train` directory, by position (LLaMA-Factory's interleave_probs, its
    # interleave_under strategy); empty: all of every dataset (concatenation)
    weights: list[float] = field(default_factory=list)
    synthetic: SyntheticDataConfig = field(default_factory=SyntheticDataConfig)
    build_synthetic: bool = False  # build the synthetic world and its datasets first; unset roots point there
    skills: SkillsDataConfig = field(default_factory=SkillsDataConfig)
    build_skills: bool = False  # build the generic-skills sets first (+exp=standin; the skills benchmark's)
    frame_cache: str | None = "${output_root}/frame_cache"  # decoded frames per (video, media spec)
    # SFT: lay each step's samples end to end in as few rows as fit `pack_tokens` (best-fit decreasing),
    # each sample with its own positions and attending only to itself (models/packing.py); the same samples,
    # loss and gradients as padded rows, fewer padding tokens. SFT; Qwen-VL families; sdpa | eager attention.
    packing: bool = False
    pack_tokens: int | None = None  # a packed row's token budget; null: the step's longest sample


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
    lr_scheduler: str = "cosine"  # any of transformers' SchedulerType names
    save_steps: int = 50  # every save is evaluated on the benchmarks
    logging_steps: int = 10
    num_workers: int = 0  # dataloader worker processes (decoding + processing)
    gradient_checkpointing: bool = False
    seed: int = 0
    # DeepSpeed ZeRO stage (2 or 3; null: plain DDP or one process). train/deepspeed.py derives the
    # DeepSpeed config from these fields, so there is no JSON to keep in step (trainer=zero2|zero3|…).
    zero: int | None = None
    offload: bool = False  # optimizer state and step on the CPU (ZeRO-Offload; needs zero)


class StageMethod(Choice):
    """What a training run optimises (``stage.method``; train/stages.py, train/preference.py)."""

    sft = "sft"  # supervised fine-tuning on data.train's samples
    dpo = "dpo"  # DPO (TRL's DPOTrainer) on preference pairs made from data.train's OVI samples
    kto = "kto"  # KTO (TRL's KTOTrainer) on the same pairs unpaired: right and wrong reactions, labelled
    grpo = "grpo"  # GRPO on data.train's prompts with verifiable rewards (train/grpo.py)


@dataclass
class StageConfig:
    """The training stage (``method``). The post-SFT stages (``dpo``, ``kto``; train/preference.py) train
    on preference pairs (data_builders/preferences.py: the right reaction to an interruption over each wrong
    one) made from data.train's OVI samples, or read from pair datasets (``builder=preference``), mixed by
    ``data.weights`` as SFT datasets are; ``kto`` on the same pairs unpaired. The reference is the starting
    model (LoRA: the adapter switched off); the held-out pairs (the ``ovi_pairs`` benchmark) report the
    implicit reward at ``preference.beta``. ``grpo`` (train/grpo.py) samples completions of data.train's
    items and trains on verifiable rewards (train/rewards), with ``stage.grpo``'s settings.

    Each stage's own settings live beside it (``train.stage_settings``: ``preference``,
    train/preference_config.py; ``grpo``, train/grpo_config.py): ``python -m train`` types them when it
    registers the schema (:func:`register_configs`), and the run's resolution fills them in where a config
    was built without them."""

    method: StageMethod = StageMethod.sft
    # dpo, kto, grpo: an SFT run's checkpoint to start from (a LoRA adapter is merged into
    # model.name_or_path once, under <run_dir>/start_model; a full checkpoint is used as it is); it is then
    # the run's base and baseline. null: the base itself.
    start_from: str | None = None
    preference: Any = None  # dpo, kto: beta, loss_type, pair_forms (train/preference_config.py)
    grpo: Any = None  # grpo: its settings (train/grpo_config.py)


# When a training's baseline and checkpoints are evaluated. inline: by the training itself, before step 1
# and after every save | async: not by the training; `python -m eval.watch <run_dir>` evaluates each
# checkpoint as it lands (on a spare GPU or another node) and logs to the same W&B run.
# (Declared by name: `async` is a Python keyword, so `EvalMode["async"]` in code.)
EvalMode = Enum("EvalMode", [("inline", "inline"), ("async", "async")])


class OviProtocol(Choice):
    """How open-ended OVIBench items are answered (multiple-choice items are the same under both)."""

    teacher_forced = "teacher_forced"  # the dataset's partial answer is given as the model's turn
    # The model's own answer, cut at interruption_time at 3 tokens/s, then the interruption turn continued
    # from the key/value cache (models/ovi_simulation.py).
    simulated = "simulated"


class ServerKind(Choice):
    """Which server a ``command`` starts, where it matters: GRPO's weight hand-over follows it
    (``train.grpo_config.HAND_OVER``)."""

    vllm = "vllm"
    transformers = "transformers"  # transformers serve


class VideoTransport(Choice):
    """How a served evaluation sends each video span's frames (decoded by our media spec, written as a
    lossless MP4 at the frame rate they were sampled at)."""

    inline = "inline"  # a data: URI in the request (vLLM, SGLang; any machine)
    path = "path"  # a file path the server reads (transformers serve, which takes no data: video; same host)


@dataclass
class ServerConfig:
    """Evaluation through an OpenAI-compatible server (vLLM, SGLang, ``transformers serve``) instead of
    in-process ``generate``: same benchmarks, scoring, results files and cache; the engine is part of every
    result's setting, so served and in-process results are never compared with each other (models/served.py).

    ``command`` starts a server for each model evaluated (the baseline, every checkpoint: a LoRA checkpoint
    merged into its base first), on a free port, and stops it after; ``{model}`` and ``{port}`` are filled
    in. Or leave it null and give ``endpoint.base_url`` of a server already serving ``model.name_or_path``
    (``python -m eval`` of that model only)."""

    command: str | None = None  # e.g. "vllm serve {model} --port {port} --max-model-len 32768"
    endpoint: EndpointConfig = field(default_factory=lambda: EndpointConfig(workers=8, timeout_s=600.0))
    model: str | None = None  # the served model's name; null: the weights path as the server was given it
    video: VideoTransport = VideoTransport.inline
    startup_timeout_s: float = 900.0  # a launched server must answer /health within this
    # GRPO's served rollouts ask for each sampled token's id and log-probability (vLLM: logprobs with
    # return_tokens_as_token_ids, served with --logprobs-mode processed_logprobs), so the loss scores the very
    # tokens sampled and corrects for the sampler (stage.grpo.vllm_importance_sampling_*); other servers
    # (transformers serve refuses the field) leave it false, and their replies are tokenized again
    sampled_tokens: bool = False
    kind: ServerKind | None = None  # which server this is (conf/server sets it); null: another

    @property
    def enabled(self) -> bool:
        return bool(self.command or self.endpoint.base_url)


@dataclass
class EvalConfig:
    """Benchmarks run on the untuned baseline and after every checkpoint save."""

    # Names in eval.benchmarks.BENCHMARKS: v2p, ovi, ovi_pairs (held-out preference pairs), and the V2P hack
    # diagnostics v2p_blind, v2p_z, v2p_shuffled, v2p_text_prompt (each needs v2p; eval/benchmarks/).
    benchmarks: list[str] = field(default_factory=lambda: ["v2p", "ovi"])
    # Each benchmark's own settings, eval.settings.<name>.<key> (e.g. eval.settings.v2p.root=<release dir>,
    # eval.settings.ovi.protocol=teacher_forced): the dataclass in eval/benchmarks/<name>.py documents each
    # key and its default, and a misspelt key fails when the config is composed.
    settings: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None  # evaluate only the first N items of each benchmark
    batch_size: int = 16
    bootstrap_resamples: int = 2000
    mode: EvalMode = EvalMode.inline  # who evaluates a training's baseline and checkpoints, and when
    # Results shared across runs and paths, by weights and settings fingerprint (eval/results_cache.py);
    # conf/eval puts it under output_root. null: each run keeps only its own results.
    results_cache: str | None = None
    server: ServerConfig = field(default_factory=ServerConfig)  # null command and base_url: in-process


@dataclass
class JudgeConfig(TextModelConfig):
    """The LLM judge of open-ended OVIBench items (``judge=none|endpoint|local``; the keys of a text model,
    core/text_models.py). ``backend: none`` leaves them unscored. Temperature stays 0."""

    endpoint: EndpointConfig = field(default_factory=lambda: EndpointConfig(workers=8))
    # Judgements by (judge, rubric version, metric, prompt): a resumed or repeated evaluation costs nothing.
    # null keeps them in memory only.
    cache: str | None = "${run_dir}/eval/judge_cache.jsonl"
    metrics: list[str] | None = None  # judge only these (iac, ifa, tfs, ves, cfs, ccs); null: all that apply


class LoggerMode(Choice):
    """W&B's mode. auto: online when WANDB_API_KEY is set, else offline."""

    auto = "auto"
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class LoggerConfig:
    """Weights & Biases; every scalar also goes to ``<run_dir>/metrics.jsonl``."""

    wandb: bool = True
    project: str = "vlm-interact"
    entity: str | None = None
    mode: LoggerMode = LoggerMode.auto


@dataclass
class RunConfig:
    """What a training and a standalone evaluation both read: the model, its media, the benchmarks and the
    judge, the logger, and where the run writes."""

    model: ModelConfig = field(default_factory=ModelConfig)
    media: MediaSpec = field(default_factory=MediaSpec)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    run_name: str = "dev"
    output_root: str = "outputs"
    run_dir: str = "${output_root}/${run_name}"


@dataclass
class TrainConfig(RunConfig):
    """A training run: everything it reads, so ``--cfg job`` prints the whole experiment."""

    peft: PeftConfig = field(default_factory=PeftConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    stage: StageConfig = field(default_factory=StageConfig)
    # plan=true: plan the run at its released size instead of running it (train/plan.py): no weights, no
    # GPU; plan.json and plan.md in the run directory, with a verdict against plan_gpu_gib per GPU
    plan: bool = False
    plan_gpu_gib: float = 80.0  # one GPU's memory (python -m launch passes its launcher's)
    plan_gpus: int | None = None  # the run's processes (world size); null: $WORLD_SIZE, else 1


@dataclass
class EvalRunConfig(RunConfig):
    """A standalone evaluation (``python -m eval``) of one model, or of one checkpoint of a training run."""

    # A training checkpoint (<run_dir>/checkpoints/checkpoint-N, LoRA or full): evaluated on the base, media
    # spec and benchmarks its run recorded (resolved_config.yaml), unless the roots are given here.
    checkpoint: str | None = None
    score_file: str | None = None  # score a V2P response file (release rows + response, model); no model runs
    show_prompt: str | None = None  # print the rendered prompt of this item id and stop; no weights load
    logger: LoggerConfig = field(default_factory=lambda: LoggerConfig(wandb=False))
    run_name: str = "eval"


def register_configs(
    benchmark_settings: Mapping[str, type] | None = None, stage_settings: Mapping[str, type] | None = None
) -> None:
    """Register the schemas that ``conf/train.yaml`` and ``conf/eval.yaml`` extend. Settings that a floor
    above owns are typed when it passes their dataclasses, so that a misspelt one fails at compose time:
    ``benchmark_settings`` (``eval.benchmarks.settings_schemas``) types ``eval.settings.<name>``,
    ``stage_settings`` (``train.stage_settings.STAGE_SETTINGS``) types ``stage.<name>``. Left out (launch/
    composes without them), those nodes take any key."""
    store = ConfigStore.instance()
    typed = {bench: OmegaConf.structured(schema) for bench, schema in (benchmark_settings or {}).items()}
    for name, run_schema in (("train_schema", TrainConfig), ("eval_schema", EvalRunConfig)):
        node = OmegaConf.structured(run_schema)
        node.eval.settings = typed
        if not typed:  # untyped (launch/ composes without the benchmarks): eval.settings.X.Y=... still works
            OmegaConf.set_struct(node.eval.settings, False)
        for stage in ("preference", "grpo") if "stage" in node else ():  # StageConfig's settings nodes
            schema = (stage_settings or {}).get(stage)
            node.stage[stage] = OmegaConf.structured(schema) if schema else {}
            if not schema:  # untyped, as eval.settings is
                OmegaConf.set_struct(node.stage[stage], False)
        store.store(name=name, node=node)
