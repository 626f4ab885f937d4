"""A tree verify in one target forward over the paged pool gives every node the logits that
transformers gives its path as a plain sequence; after greedy acceptance and compaction the
next token decodes as if the accepted path had been decoded one token at a time."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference.engine import Engine, runtime
from reference.generate import generate
from reference.methods import build
from reference.methods.dflash import load_dflash
from reference.methods.dflash_tree import DFlashTreeProposer
from reference.model import ForwardBatch
from reference.tree import accept_greedy, build_tree, compact_path, verify_tree
from reference.verify import Sampling
from tests.reference.conftest import TINY, drafter_config, write_drafter
from tests.reference.sampling_oracle import joint_23_pvalue
from tests.stats import FALSE_ALARM, seeds


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
            slots = pool.req_to_token[rows_t[:, None], prefix[:, None] + torch.arange(budget)]
            compact_path(pool.req_to_token, rows_t, prefix, res.path, slots.long())
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


@settings(max_examples=10, deadline=None)
@given(lens=st.lists(st.integers(1, 10), min_size=1, max_size=4), max_new=st.integers(1, 24),
       budget=st.sampled_from([2, 5, 9, 16]), top_k=st.integers(1, 3),
       stop_at=st.none() | st.integers(0, 23), lookahead=st.booleans(),
       seed=st.integers(0, 2**16))
def test_greedy_tree_decoding_equals_plain_greedy(target, drafter_dir, lens, max_new, budget,
                                                  top_k, stop_at, lookahead, seed):
    """The DFlash drafter (random weights) verified as trees of every budget: tokens equal
    plain greedy decoding, each round commits 1..B tokens, and no slot is lost."""
    note(f"{lens=} {max_new=} {budget=} {top_k=} {stop_at=} {lookahead=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, target.config.vocab_size, (n,), generator=g).tolist()
               for n in lens]
    full = generate(target, prompts, max_new_tokens=max_new)
    stop = () if stop_at is None else (full.tokens[0][min(stop_at, len(full.tokens[0]) - 1)],)
    plain = generate(target, prompts, max_new_tokens=max_new, stop_token_ids=stop)
    spec = f"dflash:path={drafter_dir},tree_budget={budget},tree_top_k={top_k}"
    proposer = build(spec, target)
    out = generate(target, prompts, proposer=proposer, max_new_tokens=max_new,
                   stop_token_ids=stop, lookahead=lookahead, check=True)
    assert out.tokens == plain.tokens
    depth = proposer.depth
    assert all(1 <= c <= depth + 1 for cs in out.accept_lengths for c in cs)
    pool = target.runtime.pool
    pool.check()
    assert pool.free_slots == pool.num_slots - 1


def test_tree_of_one_candidate_is_the_chain(target, drafter_dir):
    """top-k 1 and N = B: the same tokens and the same commit lengths as chain DFlash."""
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, target.config.vocab_size, (n,), generator=g).tolist()
               for n in (6, 3, 9)]
    chain = load_dflash(drafter_dir, target)
    b = chain.block_size
    tree = build(f"dflash:path={drafter_dir},tree_budget={b},tree_top_k=1", target)
    want = generate(target, prompts, proposer=chain, max_new_tokens=30)
    got = generate(target, prompts, proposer=tree, max_new_tokens=30)
    assert got.tokens == want.tokens and got.accept_lengths == want.accept_lengths


class OracleTree(DFlashTreeProposer):
    """Tree verification of drafts that know the target's greedy stream: at each depth the
    true token sits at a random rank among the top-k (so accepted paths run through later
    siblings), with probability `hit` per depth, else it is absent."""

    def __init__(self, drafter, target, streams, budget, top_k, hit, seed):
        super().__init__(drafter, target, None, budget, top_k)
        self.streams, self.hit = streams, hit
        self.rng = torch.Generator().manual_seed(seed)

    def bind(self, target, pool, graphs, *args):
        super().bind(target, pool, graphs, *args)
        rows = pool.req_to_token.shape[0]
        self.stream = torch.zeros(rows, max(map(len, self.streams)) + 64, dtype=torch.int64)
        self.prompt_len = torch.zeros(rows, dtype=torch.int64)

    def start(self, rows, request_ids, prompt_lens):
        for row, rid, n in zip(rows, request_ids, prompt_lens):
            self.stream[row, : len(self.streams[rid])] = torch.tensor(self.streams[rid])
            self.prompt_len[row] = n

    def draft_log_q(self, rnd):
        rows, prefix_lens = rnd.req_rows, rnd.prefix_lens
        bs, vocab = rows.shape[0], self.target.config.vocab_size
        logits = torch.randn(bs, self.depth, vocab, generator=self.rng)
        index = (prefix_lens[:, None] + 1 + torch.arange(self.depth)
                 - self.prompt_len[rows][:, None]).clamp(0, self.stream.shape[1] - 1)
        true = self.stream[rows[:, None], index]  # (bs, D) the greedy token at each depth
        rank = torch.randint(0, self.top_k, (bs, self.depth), generator=self.rng)
        hit = torch.rand(bs, self.depth, generator=self.rng) < self.hit
        top = logits.topk(self.top_k, dim=-1).values  # place `true` at its rank's score
        score = top.gather(2, rank[..., None])[..., 0] + 1e-3
        logits.scatter_(2, true[..., None], torch.where(hit, score, -1e9)[..., None])
        return logits.log_softmax(-1)


@pytest.mark.parametrize("budget,top_k,hit", [(9, 3, 0.9), (16, 2, 0.8), (5, 3, 1.0)])
def test_deep_trees_stay_lossless(target, drafter_dir, budget, top_k, hit):
    """Paths accepted through second and third candidates: compaction and injection keep
    every later round exact, and rounds commit long paths."""
    g = torch.Generator().manual_seed(budget)
    prompts = [torch.randint(0, target.config.vocab_size, (n,), generator=g).tolist()
               for n in (5, 9, 2)]
    plain = generate(target, prompts, max_new_tokens=40)
    drafter = load_dflash(drafter_dir, target).drafter
    tree = OracleTree(drafter, target, plain.tokens, budget, top_k, hit, seed=budget)
    out = generate(target, prompts, proposer=tree, max_new_tokens=40, check=True)
    assert out.tokens == plain.tokens
    assert out.stats["tau"] > 1.5


class RecordingOracle(OracleTree):
    """OracleTree whose rounds also run the real drafter and keep its log q (depths 1..D) with
    the round's prefix length and anchor: what the drafter saw of the injected context."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def draft_log_q(self, rnd):
        real = DFlashTreeProposer.draft_log_q(self, rnd)
        self.seen.append((int(rnd.prefix_lens[0]), int(rnd.verified_id[0]), real[0].clone()))
        return super().draft_log_q(rnd)


def test_tree_rounds_inject_the_accepted_path(target, drafter_dir):
    """After rounds whose accepted paths run through second and third siblings, the drafter
    sees exactly the context a fresh prefill of the committed tokens gives it (the prefill's
    injection is the chain's): each round's draft equals the first draft of a new request
    whose prompt is everything committed before that round."""
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, target.config.vocab_size, (6,), generator=g).tolist()
    plain = generate(target, [prompt], max_new_tokens=24).tokens[0]
    seq = prompt + plain
    drafter = load_dflash(drafter_dir, target).drafter
    tree = RecordingOracle(drafter, target, [plain], 9, 3, 0.9, seed=5)
    out = generate(target, [prompt], proposer=tree, max_new_tokens=24)
    assert out.tokens[0] == plain
    assert sum(c > 2 for c in out.accept_lengths[0]) >= 2  # paths of depth 2 and more
    for prefix, anchor, log_q in tree.seen[1:]:
        fresh = RecordingOracle(drafter, target, [seq[prefix:]], 9, 3, 0.9, seed=0)
        generate(target, [seq[:prefix]], proposer=fresh, max_new_tokens=2)
        assert fresh.seen[0][:2] == (prefix, anchor)
        torch.testing.assert_close(log_q, fresh.seen[0][2], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", seeds())
def test_tree_sampling_keeps_the_target_distribution(small_vocab, tmp_path, seed):
    """Tokens 2 and 3 after a fixed prompt at T = 1 come from the first tree round (depths 1
    and 2 of a 9-node, top-3 tree drafted by a random drafter): their joint must be the
    target's, computed exactly by enumeration under transformers.

    4,000 rows, chi-square at 1e-3 (24 cells expect 5 or more). Power: 5 points of
    probability moved between the two likeliest cells (p = 0.457 and 0.212) give a
    noncentrality of 4,000 * 0.05^2 * (1/0.457 + 1/0.212) = 69 against a critical value of
    51.2 (24 dof): detected 99.6% of the time (simulated noncentral chi-square)."""
    target, model = small_vocab
    write_drafter(tmp_path, drafter_config({**TINY, "vocab_size": 8}, block_size=4))
    proposer = load_dflash(tmp_path, target, tree_budget=9)
    proposer.top_k = 3
    prompt, rows = [3, 1, 4], 4000
    out = generate(target, [prompt] * rows, proposer=proposer, max_new_tokens=3,
                   temperature=1.0, seed=13 + seed)
    assert joint_23_pvalue(out.tokens, model, prompt) > FALSE_ALARM
    assert max(c for cs in out.accept_lengths for c in cs) > 1  # some rounds took a path
