import numpy as np
import pytest
from hypothesis import given

from adaserve.scheduler import CandidateBatch, CandidateTree
from tree_strategies import trees


def test_from_edges_accumulates_path_probability():
    t = CandidateTree.from_edges([-1, 0, 0, 1], [5, 6, 7, 8], np.log([1.0, 0.5, 0.25, 0.5]))
    np.testing.assert_allclose(t.path_prob, [1.0, 0.5, 0.25, 0.25])
    np.testing.assert_array_equal(t.depth, [0, 1, 1, 2])
    assert t.size == 4


@pytest.mark.parametrize(
    "parent, log_prob, depth, message",
    [
        ([0, 0], [0.0, -1.0], [0, 1], "root"),
        ([-1, 1], [0.0, -1.0], [0, 1], "precede"),
        ([-1, 2, 0], [0.0, -1.0, -1.0], [0, 2, 1], "precede"),
        ([-1, 0], [0.0, -1.0], [0, 2], "depth"),
        ([-1, 0, 1], [0.0, -1.0, -0.5], [0, 1, 2], "increase"),
        ([-1, 0], [0.0, float("nan")], [0, 1], "NaN"),
        ([-1, 0], [-0.1, -1.0], [0, 1], "root"),
    ],
)
def test_invalid_trees_are_rejected(parent, log_prob, depth, message):
    with pytest.raises(ValueError, match=message):
        CandidateTree(parent, np.zeros(len(parent)), log_prob, depth)


def test_empty_and_mismatched_arrays_are_rejected():
    with pytest.raises(ValueError):
        CandidateTree([], [], [], [])
    with pytest.raises(ValueError):
        CandidateTree([-1, 0], [1], [0.0, -1.0], [0, 1])


def test_zero_probability_nodes_are_allowed():
    t = CandidateTree.from_edges([-1, 0], [1, 2], [0.0, -np.inf])
    assert t.path_prob[1] == 0.0


@given(st_trees=trees())
def test_batch_round_trips_trees(st_trees):
    other = CandidateTree.from_edges([-1, 0, 1], [1, 2, 3], np.log([1.0, 0.5, 0.5]))
    batch = CandidateBatch.from_trees([st_trees, other])
    assert batch.n == 2 and batch.width == max(st_trees.size, 3)
    back = batch.tree(0)
    np.testing.assert_array_equal(back.parent, st_trees.parent)
    np.testing.assert_array_equal(back.log_prob, st_trees.log_prob)
    assert np.all(np.isneginf(batch.log_prob[~batch.valid]))


def test_batch_validates_rows_vectorized():
    parent = np.array([[-1, 0, 0], [-1, 0, 1]])
    lp = np.array([[0.0, -1.0, -2.0], [0.0, -1.0, -0.5]])  # row 1 node 2 beats its parent
    depth = np.array([[0, 1, 1], [0, 1, 2]])
    with pytest.raises(ValueError, match="increase"):
        CandidateBatch(parent, np.zeros((2, 3)), lp, depth, [3, 3])
    # the same row is fine once its bad node is padding
    batch = CandidateBatch(parent, np.zeros((2, 3)), lp, depth, [3, 2])
    assert batch.size.tolist() == [3, 2]
    assert lp[1, 2] == -0.5  # the caller's array is not written


def test_batch_size_bounds():
    with pytest.raises(ValueError, match="nodes"):
        CandidateBatch(np.full((1, 2), -1), np.zeros((1, 2)), np.zeros((1, 2)),
                       np.zeros((1, 2)), [0])


def test_roots_batch():
    b = CandidateBatch.roots([7, 8, 9])
    assert b.n == 3 and b.width == 1 and b.token[:, 0].tolist() == [7, 8, 9]
