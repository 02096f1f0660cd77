"""The additive attention masks: the allowed patterns of the causal and tree masks, their values."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding import attention_mask
from specdec_core.decoding.target import tree_attention


def _allowed(mask: torch.Tensor) -> list[list[int]]:
    assert mask.shape[:2] == (1, 1)
    return (mask[0, 0] == 0).int().tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_additive_is_zero_where_allowed_and_the_dtypes_minimum_elsewhere(dtype):
    allowed = torch.tensor([[True, False, True], [False, True, True]])
    mask = attention_mask.additive(allowed, dtype, torch.device("cpu"))
    assert mask.dtype == dtype and mask.shape == (1, 1, 2, 3)
    low = torch.finfo(dtype).min
    expected = torch.tensor([[0.0, low, 0.0], [low, 0.0, 0.0]], dtype=dtype)[None, None]
    assert torch.equal(mask, expected)


def test_causal_rows_see_the_cache_earlier_new_rows_and_themselves():
    mask = attention_mask.causal(3, 2, torch.float32, torch.device("cpu"))
    assert _allowed(mask) == [
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1],
    ]
    assert _allowed(attention_mask.causal(2, 0, torch.float32, "cpu")) == [[1, 0], [1, 1]]


def test_tree_rows_see_the_prefix_the_pending_token_their_ancestors_and_themselves():
    # [pending, a, b, a's child]: a and b are children of the pending token
    mask, positions = tree_attention((-1, -1, 0), 2, torch.float32, torch.device("cpu"))
    assert _allowed(mask) == [
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 0, 1, 0],
        [1, 1, 1, 1, 0, 1],
    ]
    assert positions.tolist() == [[2, 3, 3, 4]]


def test_after_prefix_sees_all_of_the_prefix_and_the_seen_rows():
    seen = torch.tensor([[True, False], [True, True]])
    mask = attention_mask.after_prefix(seen, 3, torch.bfloat16, torch.device("cpu"))
    assert mask.dtype == torch.bfloat16
    assert _allowed(mask) == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert mask.min() == torch.finfo(torch.bfloat16).min
