"""onyx view without a browser: the document, the statistics, the run overlay, the page, the CLI.

The model builders here are shared with test_viewer_browser.py (which draws them in Chromium).
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.tools.cli import main as cli_main
from onyx.tools.viewer import overlay, render_page, view
from onyx.tools.viewer.document import build_document
from onyx.tools.viewer.stats import SMALL, tensor_stats

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "onyx" / "examples" / "tiny_cnn.onnx"
BERT = ROOT / "tests" / "models" / "bert_dynamo_op18.onnx"
F = TensorProto.FLOAT


# -- models ----------------------------------------------------------------------------------------
def control_model() -> bytes:
    """x -> If(cond){then: x+1 | else: x*2} -> Loop(3){acc + x} -> Square (a local function)."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["then_out"], name="then_add")],
        "then_body",
        [],
        [helper.make_tensor_value_info("then_out", F, [2, 3])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["else_out"], name="else_mul")],
        "else_body",
        [],
        [helper.make_tensor_value_info("else_out", F, [2, 3])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond"),
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"], name="loop_add"),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", F, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F, [2, 3]),
        ],
    )
    square = helper.make_function(
        "local",
        "Square",
        ["a"],
        ["b"],
        [helper.make_node("Mul", ["a", "a"], ["b"], name="square_mul")],
        [helper.make_opsetid("", 18)],
    )
    nodes = [
        helper.make_node(
            "If", ["cond"], ["branch"], name="choose", then_branch=then_g, else_branch=else_g
        ),
        helper.make_node("Loop", ["trips", "", "branch"], ["acc"], name="repeat", body=body),
        helper.make_node("Square", ["acc"], ["y"], name="square", domain="local"),
    ]
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    graph = helper.make_graph(
        nodes,
        "control",
        [
            helper.make_tensor_value_info("x", F, [2, 3]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [one, two, trips],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
        functions=[square],
        ir_version=9,
    )
    return model.SerializeToString()


def nested_model() -> bytes:
    """Scan (a running sum) then Loop whose body holds an If: subgraphs two levels deep."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"], name="scan_add"),
            helper.make_node("Identity", ["s_out"], ["y_t"], name="scan_id"),
        ],
        "scan_body",
        [
            helper.make_tensor_value_info("s_in", F, [2]),
            helper.make_tensor_value_info("x_t", F, [2]),
        ],
        [
            helper.make_tensor_value_info("s_out", F, [2]),
            helper.make_tensor_value_info("y_t", F, [2]),
        ],
    )
    branch = {
        name: helper.make_graph(
            [helper.make_node(op, ["acc_in"], [name], name=f"inner_{op.lower()}")],
            name,
            [],
            [helper.make_tensor_value_info(name, F, [2])],
        )
        for name, op in (("t", "Neg"), ("e", "Abs"))
    }
    inner_if = helper.make_node(
        "If",
        ["c_in"],
        ["acc_out"],
        name="inner_if",
        then_branch=branch["t"],
        else_branch=branch["e"],
    )
    loop_body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"], name="keep_going"), inner_if],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", F, [2]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F, [2]),
        ],
    )
    nodes = [
        helper.make_node(
            "Scan", ["init", "xs"], ["final", "ys"], name="scan", body=body, num_scan_inputs=1
        ),
        helper.make_node("Loop", ["n", "c", "final"], ["res"], name="loop", body=loop_body),
    ]
    graph = helper.make_graph(
        nodes,
        "nested",
        [
            helper.make_tensor_value_info("init", F, [2]),
            helper.make_tensor_value_info("xs", F, [3, 2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("res", F, [2]),
            helper.make_tensor_value_info("ys", F, [3, 2]),
        ],
        [numpy_helper.from_array(np.array(2, np.int64), "n")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def mlp_model(n_blocks: int, width: int = 8, bias_shift: float = 0.0, block: int = -1) -> bytes:
    """Residual blocks of 5 nodes (MatMul, Relu, Sigmoid, Mul, Add): 5 * n_blocks nodes.
    ``bias_shift`` is added to block ``block``'s weight (a second model that diverges there)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for b in range(n_blocks):
        w = (rng.standard_normal((width, width)) * 0.3).astype(np.float32)
        if b == block:
            w = w + np.float32(bias_shift)
        inits.append(numpy_helper.from_array(w, f"w{b}"))
        nodes += [
            helper.make_node("MatMul", [x, f"w{b}"], [f"a{b}"], name=f"matmul{b}"),
            helper.make_node("Relu", [f"a{b}"], [f"r{b}"], name=f"relu{b}"),
            helper.make_node("Sigmoid", [f"a{b}"], [f"s{b}"], name=f"sigmoid{b}"),
            helper.make_node("Mul", [f"r{b}", f"s{b}"], [f"m{b}"], name=f"mul{b}"),
            helper.make_node("Add", [f"m{b}", x], [f"h{b}"], name=f"add{b}"),
        ]
        x = f"h{b}"
    graph = helper.make_graph(
        nodes,
        f"mlp{n_blocks}",
        [helper.make_tensor_value_info("x", F, ["N", width])],
        [helper.make_tensor_value_info(x, F, ["N", width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    return model.SerializeToString()


def main_ids(doc: dict) -> list[str]:
    return [n["id"] for n in doc["graphs"][0]["nodes"]]


def page_document(html: str) -> dict:
    data = re.search(r'<script type="application/json" id="onyx-data">(.*?)</script>', html, re.S)
    return json.loads(data.group(1))


# -- statistics ------------------------------------------------------------------------------------
def test_stats_of_a_float_tensor():
    a = np.array([[1.0, np.nan, 3.0], [-2.0, 0.0, np.inf]], np.float32)
    s = tensor_stats(a)
    assert s["shape"] == [2, 3] and s["dtype"] == "float32"
    assert s["min"] == -2.0 and s["max"] == "inf" and s["nan"] == 1 and s["inf"] == 1
    assert s["mean"] == pytest.approx(0.5) and sum(s["hist"]) == 4
    assert s["values"][1] == "nan"  # small: the values are shown
    json.dumps(s, allow_nan=False)


def test_stats_of_a_constant_or_nearly_constant_tensor():
    assert tensor_stats(np.full(100, 3.0, np.float32))["hist"] == [100]
    near = np.array([1e9, 1e9 + 1e-7] * 50, np.float64)  # numpy cannot cut this into 24 bins
    assert sum(tensor_stats(near)["hist"]) == 100


def test_stats_keep_large_tensors_out():
    big = np.arange(SMALL + 1, dtype=np.int64)
    s = tensor_stats(big)
    assert "values" not in s and s["min"] == 0 and s["max"] == SMALL


def test_stats_of_non_tensors():
    assert tensor_stats([np.zeros(2)])["kind"] == "sequence of 1"
    assert tensor_stats(None)["kind"] == "empty optional"
    assert tensor_stats(np.array(["a", "b"], dtype=object))["values"] == ["a", "b"]


# -- the document ----------------------------------------------------------------------------------
def test_document_of_tiny_cnn():
    model = onyx.infer_shapes(onyx.load(TINY_CNN))
    doc, _ = build_document(model)
    main = doc["graphs"][0]
    conv = main["nodes"][0]
    assert conv["op"] == "Conv" and conv["family"] == "conv" and conv["version"] == 17
    assert any(a[0] == "pads" for a in conv["attrs"])
    w = main["values"][conv["inputs"][1]]
    assert w["init"] == 1 and w["stats"]["hist"] and "values" not in w["stats"]
    # symbolic dims survive inference into the edge labels
    assert main["values"][conv["outputs"][0]]["shape"][0] == "N"
    assert doc["model"]["opsets"] == {"ai.onnx": 17}


def test_document_of_subgraphs_and_functions():
    doc, _ = build_document(onyx.loads(control_model()))
    graphs = doc["graphs"]
    by_id = {n["id"]: n for g in graphs for n in g["nodes"]}
    labels = [label for label, _ in by_id["choose"]["subgraphs"]]
    assert labels == ["then_branch", "else_branch"]
    then_graph = graphs[by_id["choose"]["subgraphs"][0][1]]
    assert [n["id"] for n in then_graph["nodes"]] == ["then_add"]
    assert graphs[by_id["repeat"]["subgraphs"][0][1]]["inputs"] == ["i", "cond_in", "acc_in"]
    label, body = by_id["square"]["subgraphs"][0]
    assert label == "function Square" and graphs[body]["nodes"][0]["id"] == "square_mul"
    assert by_id["square"]["family"] == "function"


def test_nested_subgraphs_and_their_run():
    page = view(nested_model(), inputs={"c": np.array(True)})
    doc = page.document
    by_id = {n["id"]: (gi, n) for gi, g in enumerate(doc["graphs"]) for n in g["nodes"]}
    assert set(by_id) == {
        "scan",
        "scan_add",
        "scan_id",
        "loop",
        "keep_going",
        "inner_if",
        "inner_neg",
        "inner_abs",
    }
    gi, inner_if = by_id["inner_if"]
    assert doc["graphs"][gi]["parent"] == by_id["loop"][0] and inner_if["captures"] == ["acc_in"]
    inner_graph = doc["graphs"][inner_if["subgraphs"][0][1]]
    assert inner_graph["parent"] == gi  # (then_branch reads acc_in of the loop body)
    assert doc["graphs"][0]["values"]["res"]["run"]["shape"] == [2]
    assert doc["notes"] == []


def test_unnamed_and_duplicate_nodes_get_unique_ids():
    model = onyx.loads(mlp_model(2))
    nodes = model.graph.nodes
    nodes[0].name = ""
    nodes[1].name = nodes[2].name = "same"
    doc, ids = build_document(model)
    got = main_ids(doc)
    assert len(set(got)) == len(got) and got[0] == "MatMul_0" and got[2] == "same#2"
    assert ids[id(nodes[0])] == "MatMul_0"


def test_weight_stats_can_be_left_out():
    doc, _ = build_document(onyx.load(TINY_CNN), weight_stats=False)
    assert not any("stats" in v for v in doc["graphs"][0]["values"].values())


# -- the page --------------------------------------------------------------------------------------
def test_page_is_self_contained(tmp_path):
    page = view(TINY_CNN)
    html = page.html
    # nothing is fetched: no external script, stylesheet, image, font or request
    assert not re.search(
        r"(src|href)\s*=\s*[\"']?(https?:|//)|<link|@import|url\((?!#)|fetch\(|XMLHttpRequest", html
    )
    doc = page_document(html)
    assert main_ids(doc) == main_ids(page.document)
    path = page.save(tmp_path / "tiny.html")
    assert Path(path).read_text(encoding="utf-8") == html
    assert html in page._repr_html_().replace("&quot;", '"').replace("&lt;", "<").replace(
        "&gt;", ">"
    ).replace("&#x27;", "'").replace("&amp;", "&")


def test_names_cannot_break_out_of_the_script():
    model = onyx.loads(mlp_model(1))
    model.graph.nodes[0].name = "</script><script>alert(1)</script><!--"
    html = view(model).html
    assert html.count("</script>") == 2  # the data's and the code's own
    assert page_document(html)["graphs"][0]["nodes"][0]["id"].startswith("</script>")


def test_weights_stay_out_of_the_page():
    # 4 MB of weights; the page holds their statistics only
    big = onyx.loads(mlp_model(4, width=512))
    html = view(big).html
    assert len(html) < 200_000


def test_view_is_in_the_lazy_table():
    assert onyx.view is view


# -- the run and the comparison --------------------------------------------------------------------
def test_run_overlay_statistics_and_times():
    page = view(TINY_CNN, run=True)
    main = page.document["graphs"][0]
    relu = next(n for n in main["nodes"] if n["op"] == "Relu")
    run = main["values"][relu["outputs"][0]]["run"]
    assert run["min"] >= 0 and run["nan"] == 0 and run["shape"][0] == 1
    assert all("time" in n for n in main["nodes"])
    assert main["values"]["image"]["run"]["shape"] == [1, 1, 28, 28]


def test_run_on_given_inputs(tmp_path):
    x = np.full((2, 8), 0.5, np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    page = view(mlp_model(2), inputs=str(tmp_path / "in.npz"))
    values = page.document["graphs"][0]["values"]
    assert values["x"]["run"]["min"] == 0.5 and values["h1"]["run"]["shape"] == [2, 8]


def test_unnamed_nodes_are_timed_and_keep_no_name():
    model = onyx.loads(mlp_model(2))
    for node in model.graph:
        node.name = ""
    page = view(model, run=True)
    assert all("time" in n for n in page.document["graphs"][0]["nodes"])
    assert all(node.name == "" for node in model.graph)


def test_compare_with_another_model_finds_the_first_divergence(tmp_path):
    other = tmp_path / "other.onnx"
    other.write_bytes(mlp_model(4, bias_shift=0.5, block=2))
    page = view(mlp_model(4), compare=str(other))
    doc = page.document
    assert doc["compare"]["first"] == "matmul2"
    nodes = {n["id"]: n for n in doc["graphs"][0]["nodes"]}
    assert nodes["matmul1"]["error"] == 0 and nodes["matmul2"]["error"] > 0.01
    assert doc["graphs"][0]["values"]["a2"]["error"]["mismatch"] > 0


def test_compare_with_onnxruntime_agrees():
    pytest.importorskip("onnxruntime")
    page = view(TINY_CNN, compare="onnxruntime")
    doc = page.document
    assert doc["compare"]["compared"] == len(doc["graphs"][0]["nodes"])
    assert doc["compare"]["first"] == ""


def test_value_error_cases():
    assert overlay.value_error(np.zeros(3), np.zeros(4))["mismatch"] == 1.0
    e = overlay.value_error(np.array([1.0, np.nan]), np.array([1.0, np.nan]))
    assert e["mismatch"] == 0 and e["max_abs"] == 0
    assert overlay.value_error(np.array([np.nan]), np.array([1.0]))["mismatch"] == 1.0
    assert overlay.value_error(np.array(["a"]), np.array(["b"]))["mismatch"] == 1.0


def test_node_errors_blame_the_first_node_with_agreeing_inputs():
    nodes = [
        {"id": "a", "inputs": ["x"], "outputs": ["y"]},
        {"id": "b", "inputs": ["y"], "outputs": ["z"]},
    ]
    errs = {
        "x": {"rel": 0, "mismatch": 0},
        "y": {"rel": 0.5, "mismatch": 0.5},
        "z": {"rel": 1, "mismatch": 1},
    }
    worst, first = overlay.node_errors(nodes, errs)
    assert first == "a" and worst == {"a": 0.5, "b": 1.0}


# -- the command -----------------------------------------------------------------------------------
def test_cli_writes_the_page(tmp_path, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    out = tmp_path / "p.html"
    assert cli_main(["view", str(TINY_CNN), "--out", str(out), "--run"]) == 0
    assert out.exists() and "run" in page_document(out.read_text())["graphs"][0]["values"]["image"]
    assert not opened  # --out: no browser


def test_cli_opens_the_browser_without_out(monkeypatch, capsys):
    opened = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    assert cli_main(["view", str(TINY_CNN)]) == 0
    path = capsys.readouterr().out.strip()
    assert opened == [Path(path).resolve().as_uri()]
    Path(path).unlink()


def test_cli_warns_when_the_run_fails(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", image=np.zeros((1, 1, 28), np.float32))
    out = tmp_path / "p.html"
    assert (
        cli_main(["view", str(TINY_CNN), "--inputs", str(tmp_path / "in.npz"), "-o", str(out)]) == 0
    )
    assert "warning: the run failed: input 'image'" in capsys.readouterr().err
    assert "the run failed" in out.read_text()


def test_cli_reports_bad_models(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert cli_main(["view", str(bad), "--out", str(tmp_path / "x.html")]) == 1
    assert "onyx view: error" in capsys.readouterr().err


def test_serve_answers_with_the_page():
    from onyx.tools.viewer.serve import serve_in_background

    page = view(TINY_CNN)
    server = serve_in_background(page.html.encode())
    try:
        with urllib.request.urlopen(server.url, timeout=10) as r:
            assert r.read().decode() == page.html
    finally:
        server.shutdown()
        server.server_close()


def test_render_page_inlines_everything():
    html = render_page({"model": {"name": "m"}, "graphs": []})
    assert "/*SCRIPT*/" not in html and "/*STYLE*/" not in html and "/*DATA*/" not in html


def test_a_failing_run_still_draws_the_model():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="odd", domain="nowhere")
    graph = helper.make_graph(
        [node],
        "odd",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("nowhere", 1)]
    )
    page = view(model.SerializeToString(), run=True)
    assert main_ids(page.document) == ["odd"]
    assert any(note.startswith("the run failed") for note in page.document["notes"])


def test_cli_serve_answers_until_stopped(monkeypatch, capsys):
    import threading

    from onyx.tools.viewer import Viewer

    servers = []
    real_serve = Viewer.serve
    monkeypatch.setattr(
        Viewer, "serve", lambda self, **kw: servers.append(real_serve(self, **kw)) or servers[-1]
    )
    pages = []

    def browse(url):  # the "browser": fetch the page, then stop the server
        def fetch():
            with urllib.request.urlopen(url, timeout=10) as r:
                pages.append(r.read())
            servers[0].shutdown()

        threading.Thread(target=fetch).start()

    monkeypatch.setattr("webbrowser.open", browse)
    assert cli_main(["view", str(TINY_CNN), "--serve"]) == 0
    assert pages and b'id="onyx-data"' in pages[0]
    assert "serving http://127.0.0.1:" in capsys.readouterr().out
