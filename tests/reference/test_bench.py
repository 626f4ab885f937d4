"""`python -m reference.bench` on the CPU: a smoke run of the engine bench's rows."""

import pytest

PHASES = {"draft", "verify", "accept", "inject", "host"}


def test_bench_rows_split_sync_and_overlap_rounds(capsys):
    """Each batch row carries the round split of sync rounds and of overlap rounds
    (lookahead). In sync rounds the phases add up to the round (the round is the decode
    wall over the rounds; the phases sum each round's wall between the host's reads: within
    2%). In overlap rounds the first round runs before the decode wall starts (behind the
    prefill), so only the phases are checked. DFlash is lossless both ways."""
    from reference.bench import main

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
        # sync rounds: the batch runs exactly until its slowest request's last round
        assert row["request_rounds_mean"] <= row["request_rounds_max"] == row["rounds"]
        # on the CPU the device runs inside the host's enqueue: the two clocks agree
        for enqueue, split in ((row["enqueue_ms"], row["split_ms"]),
                               (row["enqueue_ms_lookahead"], row["split_ms_lookahead"])):
            assert set(enqueue) == PHASES - {"host"}
            for phase, ms in enqueue.items():
                assert ms == pytest.approx(split[phase], rel=0.05, abs=0.01)
