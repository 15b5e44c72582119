"""Mixing the training datasets by data.weights (interleave_under in exact counts): shares, counts, a
seeded draw without repeats, the record in data_mix.json, and bad weights failing before the model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import DataConfig
from core.decoding import MediaSpec
from core.errors import ConfigError
from core.files import save_samples
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from train.data import dataset_shares, load_samples, mix_datasets, mixed_counts, training_set


def _sample(name: str, video: str | None = None) -> Sample:
    parts = [Part.video(video, 0.0, 1.0)] if video else []
    turns = [Turn("user", [*parts, Part.txt("hi")]), Turn("assistant", [Part.txt("A")], loss=True)]
    return Sample(name, "v2p", turns, "test", name, (0.0, 1.0))


def _samples(prefix: str, n: int) -> list[Sample]:
    return [_sample(f"{prefix}{i:03d}") for i in range(n)]


def test_weights_become_shares_and_none_means_concatenation():
    assert dataset_shares(["a", "b"], []) is None
    assert dataset_shares(["a", "b", "c"], [1, 3, 0]) == [0.25, 0.75, 0.0]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1.0], r"data.weights has 1 weight\(s\) for 2 dataset\(s\) in data.train"),
        ([1.0, 2.0, 3.0], r"has 3 weight\(s\) for 2 dataset\(s\)"),
        ([1.0, -0.5], "non-negative and not all 0, got \\[1.0, -0.5\\]"),
        ([0.0, 0.0], "not all 0"),
        ([1.0, float("inf")], "must be finite"),
    ],
)
def test_bad_weights_are_named(weights: list[float], message: str):
    with pytest.raises(ConfigError, match=message):
        dataset_shares(["a", "b"], weights)


@pytest.mark.parametrize(
    ("sizes", "shares", "counts"),
    [
        ([100, 50], [0.5, 0.5], [50, 50]),  # the smaller dataset runs out first
        ([100, 50], [0.75, 0.25], [100, 33]),  # here the larger one does
        ([100, 50], [2 / 3, 1 / 3], [100, 50]),  # shares of the sizes: every sample, as concatenation
        ([100, 50, 7], [0.5, 0.5, 0.0], [50, 50, 0]),  # a 0 weight leaves a dataset out
    ],
)
def test_counts_are_the_largest_epoch_without_repeats(sizes, shares, counts):
    assert mixed_counts(sizes, shares) == counts


def test_an_empty_dataset_with_a_weight_is_named():
    with pytest.raises(ConfigError, match=r"data.train\[1\] is empty"):
        mixed_counts([10, 0], [0.5, 0.5])
    assert mixed_counts([10, 0], [1.0, 0.0]) == [10, 0]


def test_the_draw_is_seeded_without_repeats_in_dataset_order():
    datasets = [_samples("a", 40), _samples("b", 10)]
    drawn = mix_datasets(datasets, [0.5, 0.5], seed=0)
    assert [len(part) for part in drawn] == [10, 10]
    assert drawn[1] == datasets[1]  # the dataset that runs out gives all it has
    ids = [s.id for s in drawn[0]]
    assert ids == sorted(set(ids)) and set(ids) <= {s.id for s in datasets[0]}
    assert mix_datasets(datasets, [0.5, 0.5], seed=0) == drawn  # every rank draws the same
    assert mix_datasets(datasets, [0.5, 0.5], seed=1)[0] != drawn[0]
    assert mix_datasets(datasets, None, seed=0) == datasets


def test_the_training_set_uses_the_mix_and_records_it(tmp_path: Path):
    save_samples(_samples("a", 30), tmp_path / "a")
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video")
    save_samples([*_samples("b", 9), _sample("b_broken", str(broken))], tmp_path / "b")
    data = DataConfig(train=[str(tmp_path / "a"), str(tmp_path / "b")], weights=[1.0, 1.0])
    result = training_set(data, seed=0, spec=MediaSpec(), cache=FrameCache(None))
    assert [e["id"] for e in result.quarantined] == ["b_broken"]
    assert result.mix == {
        "strategy": "interleave_under",
        "seed": 0,
        "samples": 19,
        "datasets": [
            {"path": data.train[0], "weight": 1.0, "share": 0.5, "samples": 30, "drawn": 10, "used": 10},
            {"path": data.train[1], "weight": 1.0, "share": 0.5, "samples": 10, "drawn": 10, "used": 9},
        ],
    }
    assert len(result.rows) == 19 and sum(s.id.startswith("a") for s in result.rows) == 10
    concatenated = training_set(
        DataConfig(train=data.train), seed=0, spec=MediaSpec(), cache=FrameCache(None)
    )
    assert concatenated.mix["strategy"] == "concat"
    assert [d["drawn"] for d in concatenated.mix["datasets"]] == [30, 10]
    everything = [s.id for s in load_samples(data.train)]
    assert [s.id for s in concatenated.rows] == [i for i in everything if i != "b_broken"]


@pytest.mark.slow  # importing the training recipe takes seconds
def test_bad_weights_fail_before_the_model_loads(compose, tmp_path: Path, monkeypatch):
    import eval.run_models
    import train.recipe

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(eval.run_models, "load_base", no_model)
    monkeypatch.setattr(eval.run_models, "load_processor", no_model)
    monkeypatch.setattr(train.recipe, "build_if_tiny", no_model)
    cfg = compose(
        "train",
        "+exp=quickstart",
        f"output_root={tmp_path}",
        "data.build_synthetic=false",
        f"data.train=[{tmp_path / 'a'},{tmp_path / 'b'}]",
        "data.weights=[1,2,3]",
        "logger=none",
    )
    with pytest.raises(ConfigError, match="data.weights has 3 weight"):
        train.recipe.train(cfg)


def test_weights_compose_and_are_kept_in_the_resolved_config(compose, tmp_path: Path):
    from core.rundir import RunDir

    cfg = compose("train", "+exp=quickstart", f"output_root={tmp_path}", "data.weights=[1,0.5]")
    assert cfg.data.weights == [1.0, 0.5]
    RunDir(cfg.run_dir).write_config(cfg)
    assert RunDir(cfg.run_dir).read_config().data.weights == [1.0, 0.5]
    assert RunDir(cfg.run_dir).data_mix_file == Path(cfg.run_dir) / "data_mix.json"


@pytest.mark.slow
def test_a_run_writes_its_data_mix(small_train_config, tmp_path: Path):
    from train.recipe import train

    cfg = small_train_config(
        tmp_path,
        "eval=none",
        "logger=none",
        "trainer.max_steps=1",
        "trainer.save_steps=1",
        "trainer.batch_size=2",
        "data.weights=[1,1]",
    )
    resolved = train(cfg).run.cfg  # data.train: the synthetic training sets
    record = json.loads((Path(cfg.run_dir) / "data_mix.json").read_text())
    assert record["strategy"] == "interleave_under" and record["seed"] == cfg.trainer.seed
    assert [d["path"] for d in record["datasets"]] == resolved.data.train and len(resolved.data.train) == 2
    drawn = [d["drawn"] for d in record["datasets"]]
    assert drawn[0] == drawn[1] == min(d["samples"] for d in record["datasets"])
