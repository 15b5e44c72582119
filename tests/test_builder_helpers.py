"""The helpers every builder shares: atomic writes, JSON reading, value checks, the CLI's error line."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from data_builders.checks import duplicate_ids, is_list_of, is_number, is_string
from data_builders.cli import run_cli
from data_builders.errors import DataError, SettingError
from data_builders.files import (
    atomic_path,
    crosstab_markdown,
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
        raise SettingError("mix needs 3 weights")

    with pytest.raises(SystemExit) as caught:
        run_cli(bad_setting)
    assert caught.value.code == 2 and capsys.readouterr().err == "error: mix needs 3 weights\n"
    with pytest.raises(KeyError):  # a bug is not a user error: its traceback stays
        run_cli(lambda: {}["x"])


def test_a_synthetic_build_with_other_settings_is_never_deleted_silently(tmp_path):
    from data_builders.build import SyntheticDataConfig, build_synthetic
    from data_builders.errors import SettingError

    root = tmp_path / "synthetic"
    build_synthetic(
        SyntheticDataConfig(root=str(root), train_videos=2, eval_videos=2, vp_questions_per_video=1)
    )
    before = (root / "build.json").read_text()
    with pytest.raises(SettingError, match="train_videos: 2 there, 3 asked"):
        build_synthetic(
            SyntheticDataConfig(root=str(root), train_videos=3, eval_videos=2, vp_questions_per_video=1)
        )
    assert (root / "build.json").read_text() == before
