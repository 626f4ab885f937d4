"""A tree verify in one target forward over the paged pool gives every node the logits that
transformers gives its path as a plain sequence; after greedy acceptance and compaction the
next token decodes as if the accepted path had been decoded one token at a time."""

from __future__ import annotations

import pytest
import torch

from reference.engine import Engine, runtime
from reference.model import ForwardBatch
from reference.tree import accept_greedy, build_tree, compact_path, verify_tree
from reference.verify import Sampling


def _hf_last_logits(hf_model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([ids])).logits[0, -1]


def _path_tokens(tree, b: int, node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(int(tree.tokens[b, node]))
        node = int(tree.parents[b, node])
    return path[::-1]


@pytest.mark.parametrize("lens,depth,k,budget,seed", [
    ([5, 3], 3, 3, 9, 1),  # bushy: siblings at every depth
    ([7], 4, 2, 11, 2),  # a budget that is not a power of two
    ([2, 6, 4], 4, 1, 5, 3),  # the chain
    ([4, 1], 2, 3, 13, 4),  # more budget than the tree has nodes: padding nodes
])
def test_tree_logits_are_each_paths_logits(target, hf_model, lens, depth, k, budget, seed):
    g = torch.Generator().manual_seed(seed)
    vocab = target.config.vocab_size
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]
    rt = runtime(target, None, 4, 64)
    pool = rt.pool
    rows = [pool.admit(n + budget + 2) for n in lens]
    try:
        with torch.inference_mode():
            anchor = Engine(target, None, rt, Sampling(), 0).prefill(rows, prompts,
                                                                    [0] * len(rows))
            log_q = torch.randn(len(rows), depth, vocab, generator=g).log_softmax(-1)
            tree = build_tree(anchor, log_q, budget, k)
            rows_t, prefix = torch.tensor(rows), torch.tensor(lens)
            logits, _ = verify_tree(target, pool, tree, rows_t, prefix)
            for b, prompt in enumerate(prompts):
                for i in range(budget):
                    if not torch.isfinite(tree.log_score[b, i]):
                        continue
                    want = _hf_last_logits(hf_model, prompt + _path_tokens(tree, b, i))
                    torch.testing.assert_close(logits[b, i], want, rtol=1e-5, atol=1e-6)
            # greedy acceptance, compaction, then one plain decode step after the path
            res = accept_greedy(tree, logits.argmax(-1), depth)
            compact_path(pool.req_to_token, rows_t, prefix, res.path, budget)
            nxt = prefix + res.accept_lens + 1  # position of the bonus token
            batch = ForwardBatch(nxt[:, None], pool.req_to_token[rows_t].long().gather(
                1, nxt[:, None]), rows_t, nxt + 1)
            hidden, _ = target.forward(res.bonus[:, None], batch, pool.req_to_token, pool.k,
                                       pool.v)
            step = target.logits(hidden)[:, 0]
            for b, prompt in enumerate(prompts):
                path = [int(tree.tokens[b, p]) for p in res.path[b].tolist() if p >= 0]
                want = _hf_last_logits(hf_model, prompt + path + [int(res.bonus[b])])
                torch.testing.assert_close(step[b], want, rtol=1e-5, atol=1e-6)
    finally:
        for r in rows:
            pool.release(r)
