"""Symbolic shape inference: the dim expression type, the rules that build expressions (each
checked against a run of the model at two bindings of its input dims), the API and CLI switches,
and parity with onnxruntime's symbolic_shape_infer on committed fixtures."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import onyx
from onyx import helper
from onyx.inference import symbolic as sym
from onyx.ir import DataType

ROOT = Path(__file__).resolve().parent.parent
F, I64 = DataType.FLOAT, DataType.INT64

# -- the expression type --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "got, want",
    [
        (sym.add("seq", "past"), "past + seq"),
        (sym.add("past", "seq"), "past + seq"),
        (sym.add("seq", 0), "seq"),
        (sym.sub(sym.add("seq", 3), 3), "seq"),
        (sym.sub("seq", "seq"), 0),
        (sym.mul("batch", "seq"), "batch*seq"),
        (sym.mul("seq", "batch", 1), "batch*seq"),
        (sym.add(sym.mul(2, "n"), "n"), "3*n"),
        (sym.mul("n", "n"), "n**2"),
        (sym.sub(1, "seq"), "1 - seq"),  # (sympy's order: a positive term first)
        (sym.sub("past", "seq"), "past - seq"),
        (sym.sub(0, "seq"), "-seq"),
        (sym.floordiv("h", 2), "floor(h/2)"),
        (sym.floordiv(sym.add(sym.mul(2, "h"), 3), 2), "h + 1"),
        (sym.floordiv(sym.sub("h", 1), 2), "floor((h + 1)/2) - 1"),
        (sym.floordiv(sym.add(sym.mul(2, "h"), 2), 4), "floor((h + 1)/2)"),
        (sym.floordiv(sym.floordiv("s", 5), 2), "floor(s/10)"),
        (sym.ceildiv("h", 2), "ceiling(h/2)"),
        (sym.ceildiv(sym.mul(4, "h"), 2), "2*h"),
        (sym.mod(sym.mul(2, "h"), 2), 0),
        (sym.mod("h", 2), "Mod(h, 2)"),
        (sym.floordiv(sym.mul("batch", "seq", 768), sym.mul("batch", 12)), "64*seq"),
        (sym.floordiv(sym.mul(sym.add("n", 1), "b", 4), sym.mul(sym.add("n", 1), 2)), "2*b"),
        (sym.dmax("h", 0), "h"),
        (sym.dmax("h", sym.add("h", 1)), "h + 1"),
        (sym.dmin("seq", sym.dmin(64, "seq")), "Min(64, seq)"),
        (sym.dmax("seq", sym.dmin(64, "seq")), "seq"),
        (sym.dmax("a", "b"), "Max(a, b)"),
        (sym.add("n", None), None),
        (sym.floordiv("n", 0), None),
    ],
)
def test_canonical_forms(got, want):
    assert got == want


@pytest.mark.parametrize(
    "text, want",
    [
        ("seq+past", "past + seq"),
        ("-seq + 1", "1 - seq"),  # onnxruntime's tool (sympy) spacing or none: one form
        ("past_sequence_length + sequence_length", "past_sequence_length + sequence_length"),
        ("floor((h - 1)/2) + 1", "floor((h + 1)/2)"),
        ("ceiling(h/2)", "ceiling(h/2)"),
        ("Mod(h, 2)", "Mod(h, 2)"),
        ("Max(4, seq)", "Max(4, seq)"),
        ("2*N", "2*N"),
        ("batch-size", "batch-size"),  # a name with a dash, not a difference
        ("input.1", "input.1"),
        ("sequence length", "sequence length"),  # no expression: one opaque name
        ("DynamicDimension.0", "DynamicDimension.0"),
        ("16", 16),
        ("N**100000", "N**100000"),  # (no huge power is expanded: an opaque name)
    ],
)
def test_parse_and_print(text, want):
    assert sym.canonical(text) == want
    if isinstance(want, str):
        assert sym.canonical(want) == want  # printing parses back to itself


def test_size_limit():
    """A product of many sums is unknown rather than a page-long dim."""
    sums = [sym.add(f"a{i}", f"b{i}") for i in range(8)]
    assert sym.mul(*sums[:5]) is not None and sym.mul(*sums) is None


def test_evaluation_and_equality():
    d = sym.add(sym.floordiv(sym.sub("h", 1), 2), 1)
    for h in range(1, 40):
        assert sym.evaluate(d, {"h": h}) == (h - 1) // 2 + 1
    assert sym.evaluate("past + seq", {"seq": 3}) is None  # an unbound symbol
    assert sym.same("seq + past", "past+seq") and not sym.same("seq", "past")
    assert sym.equal("seq", -1) is False and sym.equal(sym.add("seq", 1), 0) is False
    assert sym.equal("seq", 4) is None and sym.equal("seq", "seq") is True


# -- rules, checked against runs ------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits=(), opset=18):
    ins = [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs]
    outs = [helper.make_tensor_value_info(n, F, None) for n in outputs]
    inits = [helper.make_tensor(n, t, list(np.shape(v)), np.ravel(v)) for n, t, v in inits]
    g = helper.make_graph(nodes, "g", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _inferred(m, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onyx.infer_shapes(m)
    for v in list(m.graph.outputs) + [v for n in m.graph for v in n.outputs]:
        if v.name == name:
            return list(v.type.shape.dims)
    raise KeyError(name)


def _check_against_runs(m, inputs, bindings):
    """Every output's inferred dims, evaluated under each binding, are the shapes a run gives."""
    names = [v.name for v in m.graph.outputs]
    dims = {n: _inferred(m, n) for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (an unsorted graph is reported, and run)
        session = onyx.InferenceSession(m)
    for binding in bindings:
        feeds = {}
        for name, t, shape in inputs:
            concrete = [binding[d] if isinstance(d, str) else d for d in shape]
            feeds[name] = np.ones(concrete, np.float32 if t == F else np.int64)
        for name, out in zip(names, session.run(names, feeds)):
            want = [sym.evaluate(d, binding) for d in dims[name]]
            assert want == list(out.shape), (name, dims[name], binding)
    return dims


BINDINGS = [{"N": 2, "H": 9, "W": 14, "S": 5, "P": 3}, {"N": 3, "H": 16, "W": 7, "S": 2, "P": 6}]
X4 = ("x", F, ["N", 3, "H", "W"])


def test_conv_pool_formulas():
    w = np.zeros((4, 3, 3, 3), np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node(
            "AveragePool", ["x"], ["q"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1
        ),  # fmt: skip
        helper.make_node("ConvTranspose", ["x", "wt"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w"], ["s"], strides=[2, 2], auto_pad="SAME_UPPER"),
    ]
    inits = [("w", F, w), ("wt", F, np.zeros((3, 2, 3, 3), np.float32))]
    m = _model(nodes, [X4], ["c", "p", "q", "t", "s"], inits)
    dims = _check_against_runs(m, [X4], BINDINGS)
    assert dims["c"] == ["N", 4, "floor((H + 1)/2)", "floor((W + 1)/2)"]
    assert dims["p"] == ["N", 3, "floor((H + 1)/2) - 1", "floor((W + 1)/2) - 1"]
    assert dims["t"] == ["N", 2, "2*H - 1", "2*W - 1"]
    assert dims["s"] == ["N", 4, "ceiling(H/2)", "ceiling(W/2)"]


def test_concat_reshape_flatten_matmul():
    nodes = [
        helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "to"], ["r"]),
        helper.make_node("Flatten", ["cat"], ["f"], axis=2),
        helper.make_node("MatMul", ["a", "m"], ["mm"]),
        helper.make_node("Tile", ["a", "reps"], ["tl"]),
        helper.make_node("Pad", ["a", "pads"], ["pd"]),
    ]
    inputs = [("a", F, ["N", "S", 4]), ("b", F, ["N", "P", 4])]
    inits = [("to", I64, np.array([0, -1], np.int64)), ("m", F, np.zeros((4, 2), np.float32)),
             ("reps", I64, np.array([2, 1, 3], np.int64)),
             ("pads", I64, np.array([0, 1, 0, 0, 2, 0], np.int64))]  # fmt: skip
    m = _model(nodes, inputs, ["cat", "r", "f", "mm", "tl", "pd"], inits)
    dims = _check_against_runs(m, inputs, BINDINGS)
    assert dims["cat"] == ["N", "P + S", 4]
    assert dims["r"] == ["N", "4*P + 4*S"]
    assert dims["f"] == ["N*P + N*S", 4]
    assert dims["mm"] == ["N", "S", 2]
    assert dims["tl"] == ["2*N", "S", 12]
    assert dims["pd"] == ["N", "S + 3", 4]


def test_shape_data_through_gather_arithmetic_to_reshape_expand_range():
    """Shape -> Gather -> Mul/Add/Div -> Unsqueeze -> Concat -> Reshape / Expand /
    ConstantOfShape / Range, and Slice with ends taken from a shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "i2"], ["h"], axis=0),
        helper.make_node("Mul", ["n", "two"], ["n2"]),
        helper.make_node("Add", ["h", "one"], ["h1"]),
        helper.make_node("Div", ["h1", "two"], ["half"]),
        helper.make_node("Unsqueeze", ["n2", "ax0"], ["n2u"]),
        helper.make_node("Unsqueeze", ["half", "ax0"], ["halfu"]),
        helper.make_node("Concat", ["n2u", "halfu", "m1"], ["target"], axis=0),
        helper.make_node("ConstantOfShape", ["target"], ["zeros"]),
        helper.make_node("Reshape", ["zeros", "flat"], ["r"]),
        helper.make_node("Range", ["zero", "h", "one"], ["rng"]),
        helper.make_node("Slice", ["x", "zero1", "h1u", "ax2"], ["sl"]),
        helper.make_node("Unsqueeze", ["h1", "ax0"], ["h1u"]),
        helper.make_node("Expand", ["one_f", "s"], ["ex"]),
    ]
    scalar = lambda v: np.array(v, np.int64)  # noqa: E731
    inits = [("i0", I64, scalar(0)), ("i2", I64, scalar(2)), ("two", I64, scalar(2)),
             ("one", I64, scalar(1)), ("zero", I64, scalar(0)), ("ax0", I64, scalar([0])),
             ("ax2", I64, scalar([2])), ("zero1", I64, scalar([0])), ("m1", I64, scalar([5])),
             ("flat", I64, scalar([-1])), ("one_f", F, np.ones((1,), np.float32))]  # fmt: skip
    m = _model(nodes, [X4], ["zeros", "r", "rng", "sl", "ex"], inits)
    dims = _check_against_runs(m, [X4], BINDINGS)
    assert dims["zeros"] == ["2*N", "floor((H + 1)/2)", 5]
    assert dims["r"] == ["10*N*floor((H + 1)/2)"]
    assert dims["rng"] == ["H"]
    assert dims["sl"] == ["N", 3, "H", "W"]  # (Min(H + 1, H) is H)
    assert dims["ex"] == ["N", 3, "H", "W"]


def test_split_slice_resize_broadcast():
    nodes = [
        helper.make_node("Split", ["x"], ["s0", "s1"], axis=2, num_outputs=2),
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["last"]),
        helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Add", ["x", "row"], ["b"]),
    ]
    inits = [("st", I64, np.array([-1], np.int64)), ("en", I64, np.array([2**62], np.int64)),
             ("ax", I64, np.array([3], np.int64)),
             ("scales", F, np.array([1, 1, 2, 0.5], np.float32))]  # fmt: skip
    inputs = [X4, ("row", F, [1, 1, 1, "W"])]
    m = _model(nodes, inputs, ["s0", "s1", "last", "up", "b"], inits)
    dims = _check_against_runs(m, inputs, BINDINGS)
    assert dims["s0"] == ["N", 3, "ceiling(H/2)", "W"]
    assert dims["s1"] == ["N", 3, "H - ceiling(H/2)", "W"]
    assert dims["last"] == ["N", 3, "H", 1]
    assert dims["up"] == ["N", 3, "2*H", "floor(W/2)"]
    assert dims["b"] == ["N", 3, "H", "W"]


def test_symbolic_off_and_unnamed_unknowns():
    inputs = [("a", F, ["S", 2]), ("b", F, ["P", 2])]

    def dims(**kw):
        nodes = [helper.make_node("Concat", ["a", "b"], ["cat"], axis=0),
                 helper.make_node("NonZero", ["a"], ["nz"])]  # fmt: skip
        m = _model(nodes, inputs, ["cat", "nz"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onyx.infer_shapes(m, **kw)
        return [list(v.type.shape.dims) for v in m.graph.outputs]

    assert dims() == [["P + S", 2], [2, "unk__0"]]
    cat, nz = dims(symbolic=False)
    assert cat[0].startswith("unk__") and cat[1] == 2 and nz[1].startswith("unk__")
    assert dims(name_unknown=False) == [["P + S", 2], [2, None]]


def test_cli_symbolic_switch(tmp_path, capsys):
    from onyx.tools.cli import main

    m = _model([helper.make_node("Concat", ["a", "b"], ["cat"], axis=0)],
               [("a", F, ["S", 2]), ("b", F, ["P", 2])], ["cat"])  # fmt: skip
    onyx.save(m, str(tmp_path / "m.onnx"))
    for flag, want in (([], "P + S"), (["--no-symbolic"], None)):
        assert main(["infer", str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx"), *flag]) == 0
        dim = onyx.load(str(tmp_path / "o.onnx")).graph.outputs[0].type.shape.dims[0]
        assert dim == want if want else dim.startswith("unk__")
    assert "computed from symbols" in capsys.readouterr().out


# -- parity with onnxruntime's tool ---------------------------------------------------------------

PARITY = [
    ("transformers", "tests/models/transformers/gpt2_ort_opt99.onnx"),
    ("zoo", "tests/models/zoo/optimum_bert_model.onnx"),
    ("zoo", "tests/models/zoo/optimum_wav2vec2_model.onnx"),
    ("exporters", "tests/models/unet_torchscript_op17.onnx"),
    ("zoo", "tests/models/zoo/tf2onnx_sequence_op13.onnx"),
    ("zoo", "tests/models/zoo/paddle2onnx_vision_op11.onnx"),
]


@pytest.mark.parametrize("group, path", PARITY, ids=[Path(p).stem for _, p in PARITY])
def test_parity_with_onnxruntime_symbolic_shape_infer(group, path):
    """No dim where both tools know a value differs, and onyx knows every dim onnxruntime's tool
    knows (evaluated under random bindings of the input dims, so names do not matter)."""
    pytest.importorskip("sympy")
    pytest.importorskip("onnxruntime.tools.symbolic_shape_infer")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import symbolic_shape_parity as parity
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    t = parity.compare(Path(path).stem, ROOT / path, group)
    assert t.dims > 50
    assert t.disagree == 0 and t.ort_only == 0, t.details[:5]
    # and against an onnxruntime run of the model on its feeds: every dim onyx knows is right
    run = parity.run_check(ROOT / path)
    assert run.onyx_wrong == 0, run.wrong[:5]
    assert run.onyx_right >= run.ort_right > 0
