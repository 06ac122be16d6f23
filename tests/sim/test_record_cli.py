"""`adaserve sim record` on the real pair: the loadgen's own prompts, chat-encoded as the
server encodes them, each with the target's greedy continuation and the draft's guesses."""

import numpy as np

from adaserve.cli import build_parser
from adaserve.engine.engine import encode_chat
from adaserve.loadgen.workload import prompt_set
from adaserve.sim.record_cli import LOOKAHEAD
from adaserve.sim.replay import Recording


def test_records_the_loadgen_prompts_of_each_seed(tmp_path, models):
    out = tmp_path / "r.npz"
    args = build_parser().parse_args(["sim", "record", "--requests", "2", "--seeds", "0,1",
                                      "--max-tokens", "4", "--top-k", "4", "--out", str(out)])
    assert args.func(args) == 0
    rec = Recording.load(out)
    want = {tuple(encode_chat(models.tokenizer, p.as_messages()))
            for s in (0, 1) for p in prompt_set("short", 2, s)}
    assert set(rec.prompts) == want  # both seeds' prompt sets, nothing else
    for p, toks, ids in zip(rec.prompts, rec.tokens, rec.top_ids):
        assert list(toks[:len(p)]) == list(p)
        assert len(toks) == len(p) + 4 + LOOKAHEAD  # the continuation and the look-ahead
        assert ids.shape == (4 + LOOKAHEAD, 4)
        assert np.all((ids >= 0) & (ids < models.target.cfg.vocab))


def test_refuses_a_file_that_is_not_npz(tmp_path, capsys):
    args = build_parser().parse_args(["sim", "record", "--out", str(tmp_path / "r.json")])
    assert args.func(args) == 2
    assert ".npz" in capsys.readouterr().err
