"""The tool verbs end to end through the CLI's main()."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onyx
from onyx.tools.cli import build_parser, main

MODELS = Path(__file__).with_name("models")
RESNET = str(MODELS / "resnet_torchscript_op17.onnx")
VERBS = ["print", "extract", "merge", "infer", "stats", "fp16", "run"]


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help_with_an_example(verb, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([verb, "--help"])
    assert "example" in capsys.readouterr().out


def test_print_round_trip(tmp_path, capsys):
    assert main(["print", RESNET, "--max-elements", "4"]) == 0
    assert "{...}" in capsys.readouterr().out
    assert main(["print", RESNET, "-o", str(tmp_path / "m.txt")]) == 0
    assert main(["print", str(tmp_path / "m.txt"), "-o", str(tmp_path / "m.onnx")]) == 0
    assert len(onyx.load(tmp_path / "m.onnx").graph) == len(onyx.load(RESNET).graph)


def test_extract_merge_infer_fp16_stats(tmp_path, capsys):
    nodes = list(onyx.load(RESNET).graph)
    a, b = nodes[8].outputs[0].name, nodes[14].outputs[0].name
    assert main(["extract", RESNET, str(tmp_path / "e.onnx"), "--inputs", a, "--outputs", b]) == 0
    assert len(onyx.load(tmp_path / "e.onnx").graph) == 6
    assert main(["extract", RESNET, str(tmp_path / "f.onnx"), "--outputs", b]) == 0
    front = onyx.load(tmp_path / "f.onnx")  # from the model's inputs: nodes 0-14 at most
    assert [v.name for v in front.graph.inputs] == ["x"] and 6 < len(front.graph) <= 15
    args = ["merge", RESNET, RESNET, str(tmp_path / "m.onnx"), "--map", "logits=x"]
    assert main([*args, "--prefix1", "a/", "--prefix2", "b/"]) == 1
    assert "has shape [batch,10], input 'b/x' [batch,3,32,32]" in capsys.readouterr().err
    assert main(["infer", RESNET, str(tmp_path / "i.onnx"), "--shape", "x=2,3,32,32"]) == 0
    typed = onyx.load(tmp_path / "i.onnx")
    assert all(v.shape is not None and v.shape.is_static() for v in typed.graph.value_info)
    assert main(["fp16", RESNET, str(tmp_path / "h.onnx")]) == 0
    assert main(["stats", RESNET, "--shape", "batch=1"]) == 0
    out = capsys.readouterr().out
    assert "total MACs        26,731,146" in out
    assert (
        main(["extract", RESNET, str(tmp_path / "x.onnx"), "--inputs", "nope", "--outputs", b]) == 1
    )
    assert "no value named 'nope'" in capsys.readouterr().err


def test_run_flags(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.ones((2, 3, 32, 32), np.float32))
    out = tmp_path / "out.npz"
    assert (
        main(["run", RESNET, "--inputs", str(tmp_path / "in.npz"), "--save-outputs", str(out)]) == 0
    )
    with np.load(out) as saved:
        assert saved["logits"].shape == (2, 10)
    assert main(["run", RESNET, "--shape", "batch=3", "--save-outputs", str(out)]) == 0
    with np.load(out) as saved:
        assert saved["logits"].shape == (3, 10)
    assert main(["run", RESNET, "--shape", "x=4,3,32,32"]) == 0
    assert "[4, 3, 32, 32]" in capsys.readouterr().out


def _zip_map_file(tmp_path) -> str:
    from onnx import TensorProto, helper

    probs = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(1, []))
    graph = helper.make_graph(
        [helper.make_node("ZipMap", ["X"], ["Z"], domain="ai.onnx.ml", classlabels_int64s=[3, 7])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])],
        [helper.make_value_info("Z", helper.make_sequence_type_proto(probs))],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    path = tmp_path / "zipmap.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()
    )
    return str(path)


def test_run_saves_zip_map_rows_as_a_table_with_its_keys(tmp_path):
    model, out = _zip_map_file(tmp_path), tmp_path / "out.npz"
    np.save(tmp_path / "x.npy", np.array([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]], np.float32))
    args = ["run", model, "--input", f"X={tmp_path / 'x.npy'}", "--save-outputs", str(out)]
    assert main(args) == 0
    with np.load(out) as saved:
        assert saved["Z.keys"].tolist() == [3, 7]
        assert saved["Z"].tolist() == [[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]]


def test_run_names_the_input_whose_file_is_unreadable(tmp_path, capsys):
    assert main(["run", RESNET, "--input", f"x={tmp_path / 'missing.npy'}"]) == 1
    assert "--input x: cannot read an array from" in capsys.readouterr().err


def test_as_arrays_spreads_sequences_and_maps_and_refuses_the_rest():
    from onyx.errors import InvalidArgument
    from onyx.tools.feeds import as_arrays

    got = as_arrays({"s": [np.ones(2), np.zeros(1)], "m": {"a": 1.0}, "o": None})
    assert sorted(got) == ["m.keys", "m.values", "s.0", "s.1"]
    assert got["m.keys"].tolist() == ["a"] and got["s.1"].tolist() == [0.0]
    with pytest.raises(InvalidArgument, match="'w'"):
        as_arrays({"w": [{"a": 1.0}, {"b": 2.0}]})


def test_the_command_line_freezes_its_imports_for_the_collector(monkeypatch, capsys):
    # the `onyx` process (argv from the command line) moves what it imported out of the
    # collector's way; a Python caller passing argv keeps its own gc as it was
    import gc

    tiny = str(Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx")
    assert gc.get_freeze_count() == 0
    assert main(["check", tiny]) == 0
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr("sys.argv", ["onyx", "check", tiny])
    try:
        assert main() == 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
