"""The processor batch's layout (models/batch.py): pieces of one conversation join token by token with
their media items in order, and a conversation repeated for a group keeps one copy of its media per row."""

from __future__ import annotations

import torch

from models.batch import concat, repeat, text_piece


def _conversation() -> dict[str, torch.Tensor]:
    """One row of three tokens, the last a video's, and the video's two pixel rows."""
    return {
        "input_ids": torch.tensor([[5, 6, 7]]),
        "attention_mask": torch.ones(1, 3, dtype=torch.long),
        "mm_token_type_ids": torch.tensor([[0, 0, 2]]),
        "pixel_values_videos": torch.arange(4.0).reshape(2, 2),
        "video_grid_thw": torch.tensor([[1, 1, 2]]),
    }


def test_pieces_join_along_the_sequence_and_media_items_in_order():
    first, second = _conversation(), _conversation()
    second["pixel_values_videos"] = second["pixel_values_videos"] + 10
    joined = concat([first, text_piece(torch.tensor([[8, 9]])), second])
    assert joined["input_ids"].tolist() == [[5, 6, 7, 8, 9, 5, 6, 7]]
    assert joined["mm_token_type_ids"].tolist() == [[0, 0, 2, 0, 0, 0, 0, 2]]
    assert joined["attention_mask"].tolist() == [[1] * 8]
    assert joined["pixel_values_videos"][:, 0].tolist() == [0.0, 2.0, 10.0, 12.0]
    assert joined["video_grid_thw"].tolist() == [[1, 1, 2], [1, 1, 2]]


def test_a_per_token_input_that_a_piece_lacks_is_left_out():
    prompt = {key: value for key, value in _conversation().items() if key != "mm_token_type_ids"}
    joined = concat([prompt, text_piece(torch.tensor([[8]]))])
    assert "mm_token_type_ids" not in joined and joined["input_ids"].tolist() == [[5, 6, 7, 8]]


def test_a_repeated_conversation_has_its_media_once_per_row():
    rows = repeat(_conversation(), 3)
    assert rows["input_ids"].tolist() == [[5, 6, 7]] * 3
    assert rows["pixel_values_videos"].shape == (6, 2) and rows["video_grid_thw"].shape == (3, 3)
    completions, mask = torch.tensor([[8, 9], [8, 0], [9, 9]]), torch.tensor([[1, 1], [1, 0], [1, 1]])
    scored = concat([rows, text_piece(completions, mask)])
    assert scored["input_ids"][:, 3:].tolist() == completions.tolist()
    assert scored["attention_mask"][:, 3:].tolist() == mask.tolist()
    assert scored["mm_token_type_ids"][:, 3:].tolist() == [[0, 0]] * 3
