"""A fast seeded sample of the fuzzing harness (tests/fuzz/harness.py): every case must end
ok or with an onyx.OnyxError, never another exception, a signal or a hang. The long run is
scripts/fuzz.py (its summary is in docs/reliability.md)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import onyx  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the harness forks per case")
SAMPLE = 100


@pytest.fixture(scope="module")
def seeds():
    found = harness.node_seeds() + harness.model_seeds()
    harness.warm_up(found)
    return found


def test_a_seeded_sample_has_no_bugs(seeds):
    results = [harness.run_case(*case, timeout=30) for case in harness.plan(seeds, SAMPLE, 2026)]
    bugs = [r for r in results if r.outcome in harness.BUGS]
    counts = harness.summarize(results)
    assert counts["ok"] + counts["onyx-error"] >= SAMPLE // 2, counts  # the cases do run
    assert not bugs, "\n".join(f"{r.case}: {r.outcome} in {r.stage}: {r.detail}" for r in bugs)


@pytest.mark.parametrize(
    "mutation",
    sorted(harness.PROTO_MUTATIONS) + ["bad_feed", "fork", *harness.GEN_MUTATIONS, "native_calls"],
)
def test_every_mutation_on_a_conv_model_is_handled(seeds, mutation):
    seed = next(s for s in seeds if s.name == "test_maxpool_2d_dilations")
    for case_seed in range(2):
        r = harness.run_case(seed, mutation, case_seed, timeout=30)
        assert r.outcome not in harness.BUGS, f"{r.case}: {r.outcome} in {r.stage}: {r.detail}"


@pytest.mark.parametrize("name", ["bert_dynamo_op18", "mobilenet_quant_qdq"])
def test_threads_sharing_a_session_get_bit_identical_results(name):
    """BERT-tiny's products run on BLAS with its threads, MobileNet's convolutions on onyx's
    native pool with BLAS limited to one thread (set from each run's own thread)."""
    path = os.path.join(harness.ROOT, "tests", "models", name + ".onnx")
    sess = onyx.InferenceSession(path)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 8 for d in i.shape]
        if "int64" in i.type:
            feeds[i.name] = rng.integers(0, 10, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    expected = sess.run(None, feeds)
    results: list = []

    def work():
        for _ in range(10):
            results.append(sess.run(None, feeds))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80
    for got in results:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(expected, got))


def test_results_compare_as_sequences_and_maps():
    """A sequence output (SplitToSequence's: arrays of different shapes) made the fork case's
    comparison raise numpy's ValueError (a false bug of the long run, seed 71)."""
    seq = [np.zeros(2, np.float32), np.ones(3, np.float32)]
    assert harness.same_values(seq, [a.copy() for a in seq])
    assert not harness.same_values(seq, [seq[0], np.zeros(3, np.float32)])
    assert not harness.same_values(seq, seq[:1])
    assert harness.same_values([{"a": 1.0}], [{"a": 1.0}])
    assert not harness.same_values([{"a": 1.0}], [{"a": 2.0}])


def test_the_wire_stage_flags_a_wire_path_that_reads_otherwise(monkeypatch):
    from onyx.serde import wire_reader

    with open(os.path.join(os.path.dirname(onyx.__file__), "examples", "tiny_cnn.onnx"), "rb") as f:
        data = f.read()
    harness.wire_agrees(data)  # (read, and as protobuf reads it)
    other = wire_reader.read_model(data)
    other.graph.name = other.graph.name + "-else"
    monkeypatch.setattr(wire_reader, "read_model", lambda _: other)
    with pytest.raises(AssertionError, match="otherwise than protobuf"):
        harness.wire_agrees(data)
