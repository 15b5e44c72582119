"""The helpers every builder shares: atomic writes, JSON reading, value checks, the CLI's error line."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from core.checks import duplicate_ids, is_list_of, is_number, is_string
from core.cli import run_cli
from core.errors import ConfigError, DataError
from core.files import (
    atomic_dir,
    atomic_path,
    crosstab_markdown,
    link_or_copy,
    read_json_object,
    write_json_atomic,
    write_jsonl_atomic,
    write_reports,
    write_text_atomic,
)


def test_atomic_writes_replace_whole_files_and_leave_no_temporaries(tmp_path: Path):
    write_text_atomic(tmp_path / "a" / "t.txt", "old")
    write_text_atomic(tmp_path / "a" / "t.txt", "new")
    write_json_atomic(tmp_path / "a" / "j.json", {"b": 1, "a": [1, 2]}, indent=2, sort_keys=True)
    write_jsonl_atomic(tmp_path / "a" / "r.jsonl", [{"x": "é"}, {"x": 2}])
    assert (tmp_path / "a" / "t.txt").read_text() == "new"
    assert (tmp_path / "a" / "j.json").read_text() == json.dumps({"a": [1, 2], "b": 1}, indent=2) + "\n"
    assert (tmp_path / "a" / "r.jsonl").read_text(encoding="utf-8") == '{"x": "é"}\n{"x": 2}\n'
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["j.json", "r.jsonl", "t.txt"]
    # Written files keep the usual permissions (a mkstemp file would be private to its owner).
    assert (tmp_path / "a" / "t.txt").stat().st_mode & stat.S_IRGRP


def test_a_failed_write_keeps_the_old_file(tmp_path: Path):
    path = tmp_path / "t.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["t.txt"]


def test_an_atomic_directory_replaces_the_old_one_whole_or_not_at_all(tmp_path: Path):
    path = tmp_path / "hf"
    path.mkdir()
    (path / "old-shard").write_text("old")
    with atomic_dir(path) as tmp:
        tmp.mkdir()
        (tmp / "new-shard").write_text("new")
    assert [p.name for p in path.iterdir()] == ["new-shard"], "no file of the old directory is left"
    with pytest.raises(RuntimeError), atomic_dir(path) as tmp:
        tmp.mkdir()
        (tmp / "half-shard").write_text("half")
        raise RuntimeError("interrupted")
    assert [p.name for p in path.iterdir()] == ["new-shard"]
    assert [p.name for p in tmp_path.iterdir()] == ["hf"], "no temporary or old directory is left"


def test_a_failed_dataset_save_keeps_the_previous_dataset(tmp_path: Path, monkeypatch):
    import datasets

    from core.files import save_samples
    from core.sample import Part, Sample, Turn
    from train.data import load_samples

    def sample(n: int) -> Sample:
        turns = [
            Turn("user", [Part("text", text="hi")]),
            Turn("assistant", [Part("text", text="A")], loss=True),
        ]
        return Sample(f"s{n}", "v2p", turns, "test", f"video{n}", (0.0, 1.0))

    save_samples([sample(1), sample(2)], tmp_path / "hf")

    def save_half_then_die(self, path, **kwargs):  # over the old dataset's shard, were it saved in place
        Path(path).mkdir(exist_ok=True)
        (Path(path) / "data-00000-of-00001.arrow").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", save_half_then_die)
    with pytest.raises(KeyboardInterrupt):
        save_samples([sample(3)], tmp_path / "hf")
    assert [s.id for s in load_samples([str(tmp_path / "hf")])] == ["s1", "s2"]
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]


def test_a_copy_cut_short_is_not_kept_as_the_linked_file(tmp_path: Path, monkeypatch):
    src, dst = tmp_path / "src.mp4", tmp_path / "out" / "videos" / "v.mp4"
    src.write_bytes(b"video" * 1000)

    def other_filesystem(*args):
        raise OSError("Invalid cross-device link")

    def copy_half_then_die(a, b):
        Path(b).write_bytes(Path(a).read_bytes()[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "link", other_filesystem)
    with monkeypatch.context() as patch:
        patch.setattr(shutil, "copy2", copy_half_then_die)
        with pytest.raises(KeyboardInterrupt):
            link_or_copy(src, dst)
    assert list(dst.parent.iterdir()) == [], "neither the half copy nor a temporary is left"
    link_or_copy(src, dst)  # the re-run copies it whole (an existing dst would be kept as it is)
    assert dst.read_bytes() == src.read_bytes()


def test_write_reports(tmp_path: Path):
    write_reports(tmp_path, "# stats\n", {"rows": 3})
    assert (tmp_path / "stats.md").read_text() == "# stats\n"
    assert json.loads((tmp_path / "build_info.json").read_text()) == {"rows": 3}


def test_read_json_object_names_the_file(tmp_path: Path):
    path = tmp_path / "t.json"
    with pytest.raises(DataError, match=r"t\.json: cannot read track JSON"):
        read_json_object(path, "track")
    path.write_text("[1]")
    with pytest.raises(DataError, match=r"t\.json: expected a JSON object, got list"):
        read_json_object(path, "track")
    path.write_text('{"a": 1}')
    assert read_json_object(path, "track") == {"a": 1}


def test_crosstab_counts_with_totals_in_natural_order():
    table = crosstab_markdown([("10 GC", "x"), ("3 OD", "x"), ("3 OD", "y")], "dimension")
    lines = table.splitlines()
    assert lines[0] == "| dimension | x | y | total |"
    assert lines[2:] == ["| 3 OD | 1 | 1 | 2 |", "| 10 GC | 1 | 0 | 1 |", "| total | 2 | 1 | 3 |"]


def test_value_checks():
    assert is_number(1) and is_number(2.5) and not is_number(True) and not is_number("1")
    assert is_string("a") and not is_string(None)
    assert is_list_of([0, 1.5], is_number, 2) and not is_list_of([0, 1, 2], is_number, 2)
    assert not is_list_of((0, 1), is_number) and not is_list_of([0, "1"], is_number)
    assert duplicate_ids([(1, "a"), (2, "b"), (3, "a"), (4, None), (5, None)]) == [
        "row 3, field 'id': duplicate id 'a' (first on row 1)"
    ]


def test_run_cli_prints_user_errors_as_one_line(capsys):
    def bad_setting():
        raise ConfigError("mix needs 3 weights")

    with pytest.raises(SystemExit) as caught:
        run_cli(bad_setting)
    assert caught.value.code == 2 and capsys.readouterr().err == "error: mix needs 3 weights\n"
    with pytest.raises(KeyError):  # a bug is not a user error: its traceback stays
        run_cli(lambda: {}["x"])


def test_a_synthetic_build_with_other_settings_is_never_deleted_silently(tmp_path):
    from core.errors import ConfigError
    from data_builders.build import build_synthetic
    from data_builders.cli_config import SyntheticDataConfig

    root = tmp_path / "synthetic"
    build_synthetic(
        SyntheticDataConfig(root=str(root), train_videos=2, eval_videos=2, vp_questions_per_video=1)
    )
    before = (root / "build.json").read_text()
    with pytest.raises(ConfigError, match="train_videos: 2 there, 3 asked"):
        build_synthetic(
            SyntheticDataConfig(root=str(root), train_videos=3, eval_videos=2, vp_questions_per_video=1)
        )
    assert (root / "build.json").read_text() == before


def test_a_jsonl_line_cut_by_a_kill_is_skipped_and_ended_before_the_next_append(tmp_path):
    from core.files import JsonlStore

    store = JsonlStore(tmp_path / "store.jsonl")
    store.append([{"id": "a", "v": 1}, {"id": "b", "v": 2}])
    whole = store.path.read_bytes()
    store.path.write_bytes(whole[:-7])  # the kill cut line 2
    assert store.read() == {"a": {"id": "a", "v": 1}} and store.dropped == 1
    store.append([{"id": "c", "v": 3}])
    assert JsonlStore(store.path).read() == {"a": {"id": "a", "v": 1}, "c": {"id": "c", "v": 3}}
    store.append([{"id": "a", "v": 4}])  # a record made again: the last line per key wins
    assert JsonlStore(store.path).read()["a"] == {"id": "a", "v": 4}
