"""The bounded draft KV's layout (engine/draft_window.py) on small numbers: which column a
position lands in, which positions a column holds, and what a chunk's queries see."""

from __future__ import annotations

import numpy as np
import torch

from adaserve.engine.draft_window import DraftWindow

W = DraftWindow(sinks=2, window=4)


def test_positions_land_in_the_sinks_then_the_ring():
    pos = torch.arange(12)
    assert W.columns(pos).tolist() == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5, 2, 3]
    assert W.columns(np.arange(12)).tolist() == W.columns(pos).tolist()  # numpy alike
    assert W.ring_end == 6 and W.used(3) == 3 and W.used(100) == 6


def test_each_column_holds_the_latest_position_written_there():
    held = W.held(torch.tensor([3, 6, 9]), 6)
    assert held.tolist() == [[0, 1, 2, -1, -1, -1],
                             [0, 1, 2, 3, 4, 5],
                             [0, 1, 6, 7, 8, 5]]
    # after any length the window keeps the sinks and the W most recent positions
    for n in range(1, 30):
        kept = sorted(p for p in W.held(torch.tensor([n]), W.used(n))[0].tolist() if p >= 0)
        want = sorted(set(range(min(n, 2))) | set(range(max(2, n - 4), n)))
        assert kept == want, n
        assert sorted(W.kept(0, n).tolist()) == want


def test_a_chunk_sees_the_sinks_the_ring_it_leaves_and_itself_causally():
    # 9 tokens seen; a chunk of 3 at positions 9, 10, 11 overwrites columns 5, 2, 3
    fb = W.chunk_batch(slice(0, 1), torch.tensor([9]), [[7, 8, 9]], trash_col=20,
                       logits="last")
    assert fb.write_pos.tolist() == [[5, 2, 3]] and fb.positions.tolist() == [[9, 10, 11]]
    assert fb.kv_len == 6
    # columns then hold positions 0, 1, 10, 11, 8, 9
    seen = fb.mask[0, 0].int().tolist()
    assert seen == [[1, 1, 0, 0, 1, 1],   # 9: sinks, 8, itself
                    [1, 1, 1, 0, 1, 1],   # 10: + itself
                    [1, 1, 1, 1, 1, 1]]   # 11: sinks + the 4 most recent, itself included
    assert fb.out_rows.tolist() == [2]
