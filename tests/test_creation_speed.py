"""What session creation skips to be fast must not change what it makes: the pass manager's
skipping of idle passes, optimizing a model the session owns in place, the rounds settling
on old models (initializers listed as inputs), CSE keying attributes lazily, and the GC pause.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
import onyx.optimizer as opt
from onyx import serde
from onyx.errors import FormatError
from onyx.optimizer import core
from onyx.optimizer.qdq import _close
from onyx.tools.cmd_run import EXAMPLE_MODEL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.zoo import zoo_models  # noqa: E402

F = TensorProto.FLOAT
# one of each kind: QDQ (plans asked by constant folding), QOperator (lookup tables), float
# models with fusions (BERT: LayerNorm, GELU; ResNet: Conv+BN), an RNN
ZOO = {m.name: m for m in zoo_models()}
SAMPLE = [
    "mobilenet_quant_qdq",
    "bert_quant_qdq",
    "gpt_quant_qoperator",
    "bert_dynamo_op18",
    "resnet_torchscript_op17",
    "lstm_dynamo_op18",
]


def _optimized_bytes(model: onyx.ir.Model, **kw) -> bytes:
    return serde.dumps(opt.optimize(model, "all", **kw))


def _counting_passes(monkeypatch) -> dict[str, int]:
    calls: dict[str, int] = {}

    def counted(p):
        def fn(ctx):
            calls[p.name] = calls.get(p.name, 0) + 1
            return p.fn(ctx)

        return core.Pass(p.name, p.level, fn)

    monkeypatch.setattr(opt, "PASSES", [counted(p) for p in opt.PASSES])
    return calls


@pytest.mark.parametrize("name", SAMPLE)
def test_skipping_idle_passes_keeps_the_graph(name, monkeypatch):
    model = serde.load(str(ZOO[name].path))
    calls = _counting_passes(monkeypatch)
    skipped = _optimized_bytes(model)
    skipping_calls = dict(calls)
    calls.clear()
    monkeypatch.setattr(opt, "SKIP_IDLE", False)
    full = _optimized_bytes(model)
    assert skipped == full
    assert sum(skipping_calls.values()) < sum(calls.values())  # it does skip


def test_a_pass_runs_again_after_a_change():
    """CSE (the last basic pass) leaves the twin Neg dead: DCE, idle before, must run again."""
    g = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["a"]),
            helper.make_node("Neg", ["x"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = serde.loads(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    stats: dict[str, int] = {}
    out = opt.optimize(model, "basic", stats=stats)
    assert [n.op_type for n in out.graph] == ["Neg", "Add"]
    assert stats == {"CommonSubexpressionElimination": 1, "DeadCodeElimination": 1}


@pytest.mark.parametrize("name", ["mobilenet_quant_qdq", "bert_dynamo_op18"])
def test_in_place_matches_a_copy(name):
    original = serde.load(str(ZOO[name].path))
    before = serde.dumps(original)
    copied = opt.optimize(original, "all")
    assert serde.dumps(original) == before  # the copy left the caller's model alone
    owned = serde.load(str(ZOO[name].path))
    in_place = opt.optimize(owned, "all", in_place=True)
    assert in_place is owned
    assert serde.dumps(in_place) == serde.dumps(copied)


def test_session_of_an_ir_model_leaves_it_unchanged():
    model = serde.load(str(ZOO["bert_dynamo_op18"].path))
    before = serde.dumps(model)
    onyx.InferenceSession(model)
    assert serde.dumps(model) == before


def _old_model_with_twin_constants() -> onyx.ir.Model:
    """IR 3: every initializer is also an input. Two equal constants: CSE merges their uses,
    the unread twin stays (an input), and the rounds must still settle."""
    c = numpy_helper.from_array(np.ones(3, np.float32), "c")
    d = numpy_helper.from_array(np.ones(3, np.float32), "d")
    g = helper.make_graph(
        [
            helper.make_node("Add", ["x", "c"], ["a"]),
            helper.make_node("Mul", ["a", "d"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info(n, F, [3]) for n in ("x", "c", "d")],
        [helper.make_tensor_value_info("y", F, [3])],
        initializer=[c, d],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)], ir_version=3)
    return serde.loads(m.SerializeToString())


def test_unread_twin_constant_is_no_change():
    stats: dict[str, int] = {}
    out = opt.optimize(_old_model_with_twin_constants(), "basic", stats=stats)
    assert stats == {"CommonSubexpressionElimination": 1}  # once, not once a round
    mul = [n for n in out.graph if n.op_type == "Mul"][0]
    assert mul.inputs[1].name == "c"


def test_cse_keys_attributes_of_twins_only():
    """Nodes with the same op and inputs merge when their attributes match, the first kept."""
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1),
        helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2),
        helper.make_node("LeakyRelu", ["x"], ["c"], alpha=0.1),
        helper.make_node("Sum", ["a", "b", "c"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = serde.loads(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    out = opt.optimize(model, "basic")
    leaky = [n for n in out.graph if n.op_type == "LeakyRelu"]
    assert [n.outputs[0].name for n in leaky] == ["a", "b"]
    total = [n for n in out.graph if n.op_type == "Sum"][0]
    assert [v.name for v in total.inputs] == ["a", "b", "a"]


def test_cse_sizes_up_each_weight_once_and_still_merges_small_constants(monkeypatch):
    """CSE runs every round over every initializer: a weight too large to key is known as such
    by its tensor after the first run (the later runs ask nothing of it), while equal small
    constants are still merged (the first kept)."""
    from onyx.optimizer import cleanup

    asked = []
    key_of = vars(cleanup)["_const_key"]
    monkeypatch.setattr(
        cleanup, "_const_key", lambda ctx, v: asked.append(v.name) or key_of(ctx, v)
    )
    big = np.ones((64, 64), np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "c1"], ["a"]),
        helper.make_node("Mul", ["a", "c2"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(big, "w"),
        numpy_helper.from_array(np.array([2.0], np.float32), "c1"),
        numpy_helper.from_array(np.array([2.0], np.float32), "c2"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 64])],
        [helper.make_tensor_value_info("y", F, [1, 64])],
        inits,
    )
    model = serde.loads(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    ctx = core.PassContext(model)
    assert cleanup.common_subexpressions(ctx)  # (c2 merged into c1)
    assert [v.name for v in [n for n in model.graph if n.op_type == "Mul"][0].inputs] == ["a", "c1"]
    asked.clear()
    assert not cleanup.common_subexpressions(ctx)
    assert asked == []  # (each initializer known from the first run: the weight too)


def test_shape_of_a_graph_output_adds_no_constant():
    g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"])],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
    )
    model = serde.loads(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    stats: dict[str, int] = {}
    out = opt.optimize(model, "basic", stats=stats)
    assert stats == {}
    assert not out.graph.initializers
    assert [n.op_type for n in out.graph] == ["Shape"]


@pytest.mark.parametrize(
    "x, y",
    [
        ([1.0, 2.0], [1.0, 2.0]),
        ([1.0, 2.0], [1.0 + 5e-7, 2.0]),
        ([1.0, 2.0], [1.0 + 5e-6, 2.0]),
        ([1e-30], [0.0]),
        ([np.inf], [np.inf]),
        ([1.0], [np.inf]),
        ([np.nan], [np.nan]),
        ([3.0, 3.0], [3.0]),
    ],
)
def test_bias_scale_closeness_is_allclose(x, y):
    a, b = np.array(x, np.float32), np.array(y, np.float32)
    assert _close(a, b) == np.allclose(a, b, rtol=1e-6, atol=0)


def test_gc_comes_back_after_creation(tmp_path):
    path = str(ZOO["gpt_dynamo_op18"].path)
    assert gc.isenabled()
    onyx.InferenceSession(path)
    assert gc.isenabled()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(FormatError):
        onyx.InferenceSession(str(bad))
    assert gc.isenabled()
    gc.disable()
    try:
        onyx.InferenceSession(path)
        assert not gc.isenabled()  # a caller's choice stays
    finally:
        gc.enable()


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3, 4), (1 << 20, 1 << 12)])
def test_tensor_sizes(shape):
    t = onyx.ir.Tensor.from_raw(b"", onyx.ir.DataType.UINT8, shape)
    assert t.size == int(np.prod(shape, dtype=np.int64))
    assert onyx.ir.tensor.wire_size(onyx.ir.DataType.INT4, shape) == -(-t.size // 2)


def test_values_of_an_old_graph_once_each():
    g = _old_model_with_twin_constants().graph
    names = [v.name for v in g.values()]
    assert sorted(names) == ["a", "c", "d", "x", "y"]
    assert onnx  # (onnx builds the models above)


def test_cse_keeps_twins_of_a_nondeterministic_op():
    """Two RandomUniformLike of one input draw different numbers: never merged (the
    determinism is asked only of an op with a twin, so it must still be asked)."""
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["a"]),
        helper.make_node("RandomUniformLike", ["x"], ["b"]),
        helper.make_node("Relu", ["x"], ["c"]),
        helper.make_node("Relu", ["x"], ["d"]),
        helper.make_node("Sum", ["a", "b", "c", "d"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = serde.loads(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    out = opt.optimize(model, "basic")
    total = [n for n in out.graph if n.op_type == "Sum"][0]
    assert [v.name for v in total.inputs] == ["a", "b", "c", "c"]


def test_creation_loads_no_kernels_of_ops_fused_away():
    """The bundled CNN's BatchNormalization and Relu fuse into its convs: a fresh process
    creating its session never imports their kernel modules (the optimizer asked their
    traits of every node; each kernel module is a part of the cold start)."""
    code = (
        "import sys, onyx; onyx.InferenceSession(sys.argv[1]);"
        "print(sorted(m for m in sys.modules if m.startswith('onyx.runtime.kernels.')))"
    )
    tiny = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code, str(tiny)], capture_output=True, text=True, cwd=root
    )
    assert out.returncode == 0, out.stderr
    loaded = out.stdout
    assert "onyx.runtime.kernels.conv" in loaded  # (the probe sees the kernels it loads)
    assert "onyx.runtime.kernels.normalization" not in loaded


def test_strings_attribute_of_bytes_not_utf8_stays_bytes():
    node = helper.make_node("Foo", ["x"], ["y"], domain="custom", s=[b"ok", b"\xff\xfe"])
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    )
    model = serde.loads(m.SerializeToString())
    assert list(model.graph)[0].attributes["s"].value == ["ok", b"\xff\xfe"]
    again = serde.loads(serde.dumps(model))
    assert list(again.graph)[0].attributes["s"].value == ["ok", b"\xff\xfe"]


def test_a_pass_results_counts_are_its_own_net_counts(monkeypatch):
    """The pass manager tallies each run's PassContext.count calls (not copies of the stats
    before and after): net counts per name, names that came to 0 left out, and the totals
    across runs in ``stats``."""

    def counting(ctx):
        ctx.count("Fused", 2)
        ctx.count("Undone")
        ctx.count("Undone", -1)
        return False

    def quiet(ctx):
        return False

    passes = [core.Pass("Counting", core.BASIC, counting), core.Pass("Quiet", core.BASIC, quiet)]
    monkeypatch.setattr(opt, "PASSES", passes)
    stats, results = {}, []
    opt.optimize(onyx.load(EXAMPLE_MODEL), "basic", stats=stats, results=results)
    by_name = {r.name: r for r in results}
    assert by_name["Counting"].stats == {"Fused": 2}
    assert by_name["Quiet"].stats == {}
    assert stats == {"Fused": 2, "Undone": 0}


def test_optimized_model_is_the_same_whatever_the_hash_seed(tmp_path):
    """ChannelsLastTransformer's model-local functions were added in a set's order: the saved
    optimized model of a MobileNet changed with the process's string hash seed."""
    root = Path(__file__).resolve().parent.parent
    code = (
        "import sys, onyx\n"
        "so = onyx.SessionOptions()\n"
        "so.optimized_model_filepath = sys.argv[2]\n"
        "onyx.InferenceSession(sys.argv[1], so)\n"
    )
    made = []
    for seed in ("1", "2", "3", "4"):
        out = tmp_path / f"seed{seed}.onnx"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code, str(ZOO["mobilenet_torchscript_op17"].path), str(out)],
            capture_output=True,
            text=True,
            cwd=root,
            env=env,
        )
        assert run.returncode == 0, run.stderr
        made.append(out.read_bytes())
    assert len(serde.loads(made[0]).functions) > 1  # (an order to keep)
    assert all(m == made[0] for m in made[1:])
