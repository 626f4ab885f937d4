"""`python -m workbench.bench` on the CPU: a smoke run of the engine bench's rows."""

import pytest

PHASES = {"draft", "verify", "accept", "inject", "host"}


def test_bench_rows_split_sync_and_overlap_rounds(capsys):
    """Each batch row carries the round split of sync rounds and of overlap rounds
    (lookahead). In sync rounds the phases add up to the round (the round is the decode
    wall over the rounds; the phases sum each round's wall between the host's reads: within
    2%). In overlap rounds the first round runs before the decode wall starts (behind the
    prefill), so only the phases are checked. DFlash is lossless both ways."""
    from workbench.bench.decode import main

    r = main(["--preset", "tiny", "--device", "cpu", "--batch-sizes", "1,2",
              "--prompt-len", "6", "--new-tokens", "12", "--block-size", "4", "--tau", "2.5",
              "--hf-new-tokens", "0"])
    capsys.readouterr()
    assert [row["bs"] for row in r["rows"]] == [1, 2]
    for row in r["rows"]:
        assert row["lossless"] and row["dflash_lookahead_same_tokens"]
        for split in (row["split_ms"], row["split_ms_lookahead"]):
            assert set(split) == PHASES
            assert all(v >= 0 for v in split.values()) and split["verify"] > 0
        assert sum(row["split_ms"].values()) == pytest.approx(row["round_ms"], rel=0.02)
        assert row["round_ms_lookahead"] > 0
        # the rate of the leading full-batch rounds (its arithmetic: the test above)
        for key in ("dflash_full_batch_tok_s", "dflash_lookahead_full_batch_tok_s"):
            assert row[key] > 0
        # sync rounds: the batch runs exactly until its slowest request's last round
        assert row["request_rounds_mean"] <= row["request_rounds_max"] == row["rounds"]
        # on the CPU the device runs inside the host's enqueue: the two clocks agree
        for enqueue, split in ((row["enqueue_ms"], row["split_ms"]),
                               (row["enqueue_ms_lookahead"], row["split_ms_lookahead"])):
            assert set(enqueue) == PHASES - {"host"}
            for phase, ms in enqueue.items():
                assert ms == pytest.approx(split[phase], rel=0.05, abs=0.01)


def test_block_sizes_run_side_by_side_against_the_same_ar(capsys):
    """--block-size 4,8: one row per (bs, B), the B rows of a batch sharing its AR runs;
    the oracle's tau is --tau at the largest B and, at B = 4, the same geometric curve cut to
    4 (alpha solved here from 1 + a + ... + a^7 = 2.5 with numpy's polynomial roots)."""
    import numpy as np

    from workbench.bench.decode import main

    r = main(["--preset", "tiny", "--device", "cpu", "--batch-sizes", "1,2",
              "--prompt-len", "6", "--new-tokens", "12", "--block-size", "4,8", "--tau", "2.5",
              "--hf-new-tokens", "0"])
    capsys.readouterr()
    assert [(row["bs"], row["block"]) for row in r["rows"]] == [(1, 4), (1, 8), (2, 4), (2, 8)]
    roots = np.roots([1.0] * 7 + [1.0 - 2.5])  # a^7 + ... + a + (1 - 2.5) = 0
    alpha = next(x.real for x in roots if abs(x.imag) < 1e-12 and 0 < x.real < 1)
    assert r["rows"][1]["oracle_tau"] == 2.5
    assert r["rows"][0]["oracle_tau"] == pytest.approx(1 + alpha + alpha**2 + alpha**3)
    for a, b in (r["rows"][:2], r["rows"][2:]):
        assert a["ar_tok_s"] == b["ar_tok_s"] and a["ar_tokens_head"] == b["ar_tokens_head"]
    assert all(row["lossless"] and row["dflash_lookahead_same_tokens"] for row in r["rows"])
    assert r["args"]["block_sizes"] == [4, 8]


def test_verify_schedule_reaches_the_default_oracle(capsys):
    """--verify-schedule [[1,1,7],[2,1024,2]] at B = 8: the batch of 2 verifies 3 tokens a
    round while both requests live and 8 once one is done, so the tau stays under what B = 8
    alone draws (the same oracle seed) and the tokens stay AR's."""
    from workbench.bench.decode import main

    args = ["--preset", "tiny", "--device", "cpu", "--batch-sizes", "2", "--prompt-len", "6",
            "--new-tokens", "24", "--block-size", "8", "--tau", "6", "--hf-new-tokens", "0"]
    full = main(args)["rows"][0]
    short = main(args + ["--verify-schedule", "[[1,1,7],[2,1024,2]]"])["rows"][0]
    capsys.readouterr()
    assert short["lossless"] and short["dflash_lookahead_same_tokens"]
    assert short["tau"] < full["tau"]
    assert short["request_rounds_mean"] > full["request_rounds_mean"]


def test_verify_schedules_run_side_by_side_against_the_same_ar(capsys):
    """--verify-schedule "none;[[1,1,7],[2,1024,2]]" at B = 8: two rows of the one batch,
    sharing its AR runs; the row without a schedule draws what B = 8 alone draws (its own
    run, same oracle seed), the scheduled one the shorter blocks' lower tau."""
    from workbench.bench.decode import main

    args = ["--preset", "tiny", "--device", "cpu", "--batch-sizes", "2", "--prompt-len", "6",
            "--new-tokens", "24", "--block-size", "8", "--tau", "6", "--hf-new-tokens", "0"]
    alone = main(args)["rows"][0]
    rows = main(args + ["--verify-schedule", "none; [[1,1,7],[2,1024,2]]"])["rows"]
    out = capsys.readouterr().out
    assert [row["verify_schedule"] for row in rows] == [None, "[[1,1,7],[2,1024,2]]"]
    assert rows[0]["ar_tokens_head"] == rows[1]["ar_tokens_head"]
    assert rows[0]["ar_tok_s"] == rows[1]["ar_tok_s"]
    assert rows[0]["tau"] == alone["tau"] and rows[1]["tau"] < alone["tau"]
    assert all(row["lossless"] for row in rows)
    assert "schedule [[1,1,7],[2,1024,2]]" in out


def test_full_batch_rate_counts_the_rounds_every_request_is_live():
    """Two requests of 3 and 4 rounds, walls 1, 1, 1, 0.5 s: the first 3 rounds have both
    live, committing 3 + 4 + 5 and 2 + 2 + 2 tokens, 18 in 3 s. A round launched after a
    request's end (overlap) counts its time but no tokens: live counts 2, 2, 2, 2, 1 with
    4 s over the first four rounds and the same 18 + 6 tokens of the longer request."""
    from types import SimpleNamespace

    from workbench.bench.report import full_batch_tok_s

    sync = SimpleNamespace(stats={"round_times": [[2, 1.0, 0.5], [2, 1.0, 0.5], [2, 1.0, 0.5],
                                                  [1, 0.5, 0.2]]},
                           accept_lengths=[[3, 4, 5], [2, 2, 2, 6]])
    assert full_batch_tok_s(sync, 2) == pytest.approx(18 / 3)
    ahead = SimpleNamespace(stats={"round_times": [[2, 1.0], [2, 1.0], [2, 1.0], [2, 1.0],
                                                   [1, 0.5]]},
                            accept_lengths=[[3, 4, 5], [2, 2, 2, 6, 1]])
    assert full_batch_tok_s(ahead, 2) == pytest.approx(24 / 4)
    one = SimpleNamespace(stats={"round_times": [[1, 0.25]] * 4},
                          accept_lengths=[[2, 3, 1, 4]])
    assert full_batch_tok_s(one, 1) == pytest.approx(10 / 1.0)


def test_full_batch_split_averages_the_same_rounds():
    """Rounds [live, wall, draft, verify, accept, inject]: the first two have both requests
    live, (1.0 s: 0.2, 0.6, 0.05, 0.05) and (0.8 s: 0.3, 0.6, 0.05, 0.05), whose device
    phases outlast its wall (an overlap round: host 0, not negative); the third, one.
    Per full round: draft 250 ms, verify 600, accept 50, inject 50, host (100 + 0) / 2."""
    from types import SimpleNamespace

    from workbench.bench.report import full_batch_split_ms

    out = SimpleNamespace(stats={"round_times": [[2, 1.0, 0.2, 0.6, 0.05, 0.05],
                                                 [2, 0.8, 0.3, 0.6, 0.05, 0.05],
                                                 [1, 5.0, 1.0, 1.0, 1.0, 1.0]]})
    split = full_batch_split_ms(out, 2)
    assert list(split) == ["draft", "verify", "accept", "inject", "host"]
    for key, ms in dict(draft=250, verify=600, accept=50, inject=50, host=50).items():
        assert split[key] == pytest.approx(ms), key


def test_warm_ups_meet_every_graph_of_the_timed_runs(monkeypatch, capsys):
    """Requests finish at ragged rounds, so a batch drops through smaller graph buckets, and
    under a verify schedule its block changes with the live count; overlap rounds drop a
    finished request a round later than sync ones, so they may meet other shapes. A graph first
    met inside a timed run would pay its CUDA-graph capture there. So every graph a timed run
    calls (its key and input shapes, as GraphCache caches it) must have been called by an
    earlier run of the same kind (AR or method). The calls are read at GraphCache.run, which
    the CPU reaches too."""
    import workbench.bench.decode as bench
    from reference.cuda_graphs import GraphCache

    runs = []  # (kind, graph keys of its calls)
    real_run, real_generate = GraphCache.run, bench.generate

    def spy_run(self, key, fn, *inputs):
        if runs and not self.capturing:
            runs[-1][1].add(GraphCache.full_key(key[:1], inputs))
        return real_run(self, key, fn, *inputs)

    def spy_generate(target, prompts, **kwargs):
        runs.append(("ar" if kwargs.get("proposer") is None else "method", set()))
        return real_generate(target, prompts, **kwargs)

    monkeypatch.setattr(GraphCache, "run", spy_run)
    monkeypatch.setattr(bench, "generate", spy_generate)
    r = bench.main(["--preset", "tiny", "--device", "cpu", "--batch-sizes", "6",
                    "--prompt-len", "6", "--new-tokens", "40", "--block-size", "4",
                    "--tau", "2.5", "--hf-new-tokens", "0",
                    "--verify-schedule", "[[1,3,4],[4,1024,2]]"])
    capsys.readouterr()
    assert r["rows"][0]["request_rounds_mean"] < r["rows"][0]["request_rounds_max"]
    timed = runs[1:]  # the first run sizes the pool (one request)
    # AR's warm-up, then its sync and lookahead runs each with its one-token run (the
    # outside clock's prefill), the oracle's longer streams (untimed), then the method's
    # warm-up, timed and one-token runs of each mode
    assert [kind for kind, _ in timed] == ["ar"] * 6 + ["method"] * 6
    shapes = {shapes[0] for key, shapes in timed[7][1] if key == ("verify",)}
    assert len(shapes) > 1  # the verify's (bucket, block) changed within the run
    for i, (kind, keys) in enumerate(timed):
        earlier = set().union(*(s for k, s in timed[:i] if k == kind))
        if i not in (0, 5, 6, 9):  # not the warm-ups and the streams' run themselves
            assert keys <= earlier, f"run {i} ({kind}) met new graphs {keys - earlier}"


def test_rows_hit_the_requested_tau_and_carry_the_outside_clock(capsys):
    """The planned oracle: realized tau within 1% of --tau (sync and lookahead), so at_tau
    is the measured rate times requested / realized; each run's outside clock spans the
    engine's own prefill + decode seconds (it times the whole call)."""
    from workbench.bench.decode import main

    r = main(["--preset", "tiny", "--device", "cpu", "--batch-sizes", "1", "--prompt-len", "6",
              "--new-tokens", "40", "--block-size", "4", "--tau", "2.5", "--hf-new-tokens", "0"])
    capsys.readouterr()
    row = r["rows"][0]
    assert row["tau_requested"] == 2.5
    for realized, at, rate in ((row["tau_realized"], row["at_tau"], row["dflash_tok_s"]),
                               (row["tau_realized_lookahead"], row["at_tau_lookahead"],
                                row["dflash_lookahead_tok_s"])):
        assert abs(realized / 2.5 - 1) <= 0.01 and at["tau_ok"]
        assert at["at_tau_tok_s"] == pytest.approx(rate * 2.5 / realized)
    for clock in row["clock"].values():
        assert clock["engine_over_wall"] >= 1.0
        assert clock["wall_tok_s"] <= clock["engine_tok_s"]
        assert clock["wall_decode_tok_s"] > 0


def test_at_tau_flags_a_realized_tau_off_by_more_than_one_percent():
    from workbench.bench.report import at_tau

    assert at_tau(100.0, 6.5, 6.5 * 1.009) == {"tau_ok": True,
                                              "at_tau_tok_s": pytest.approx(100 / 1.009)}
    assert at_tau(100.0, 6.5, 7.31) == {"tau_ok": False, "at_tau_tok_s": None}
