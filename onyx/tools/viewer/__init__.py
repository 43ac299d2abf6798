"""``onyx view``: a model drawn as one self-contained HTML page, optionally with a run on top.

view = onyx.view("model.onnx", run=True)      # or compare="onnxruntime" / "other.onnx"
view.save("model.html"); view.open(); view    # (in Jupyter the last line draws it inline)

The page (static/) holds its own layered layout, drawing and panels: nothing is fetched, so it
works offline and from file://. Python supplies the document (document.py), the statistics
(stats.py) and the run overlay (overlay.py).
"""

from __future__ import annotations

import html
import json
import os
import warnings
import webbrowser
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument, OnyxError
from ...ir import Model

STATIC = Path(__file__).resolve().parent / "static"

__all__ = ["Viewer", "view"]


class Viewer:
    """One rendered page: ``.html`` (the text), ``.save(path)``, ``.open()``, ``.serve()``."""

    def __init__(self, document: dict[str, Any]):
        self.document = document

    @property
    def html(self) -> str:
        return render_page(self.document)

    def save(self, path: str | os.PathLike) -> str:
        path = os.fspath(path)
        Path(path).write_text(self.html, encoding="utf-8")
        return path

    def open(self, path: str | os.PathLike | None = None) -> str:
        """Save (to a temporary file unless ``path``) and open in the default browser."""
        if path is None:
            import tempfile

            fd, path = tempfile.mkstemp(prefix="onyx_view_", suffix=".html")
            os.close(fd)
        path = self.save(path)
        webbrowser.open(Path(path).resolve().as_uri())
        return path

    def serve(self, port: int = 0, host: str = "127.0.0.1"):
        """An HTTP server on localhost answering every GET with the page (not started:
        call ``serve_forever()``); its address is ``server.url``."""
        from .serve import make_server

        return make_server(self.html.encode("utf-8"), host, port)

    def _repr_html_(self) -> str:
        # an iframe keeps the page's script and style apart from the notebook's
        doc = html.escape(self.html, quote=True)
        return f'<iframe srcdoc="{doc}" style="width:100%;height:640px;border:1px solid #ccc"></iframe>'


def view(
    model: Model | str | os.PathLike | bytes,
    *,
    run: bool = False,
    inputs: dict[str, Any] | str | None = None,
    compare: str | None = None,
    weight_stats: bool = True,
    seed: int = 0,
) -> Viewer:
    """Draw ``model``; with ``run`` (or ``inputs``) overlay each value's statistics and each
    node's time from a run on ``inputs`` (a dict or an .npz path; random data by default);
    with ``compare`` ("onnxruntime" or another .onnx file) colour nodes by their error.

    An ``ir.Model`` given is annotated in place by shape inference (as ``onyx.infer_shapes``
    does); nothing else of it changes."""
    from ...inference import infer_shapes
    from .document import build_document

    model = _as_model(model)
    notes = []
    try:
        infer_shapes(model)
    except Exception as e:  # a drawing without shapes beats no drawing
        notes.append(f"shape inference failed: {e}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc, node_ids = build_document(model, weight_stats=weight_stats)
    run = run or inputs is not None or compare is not None
    if run:
        try:
            _add_run(doc, model, node_ids, _feeds(model, inputs, seed), compare)
        except OnyxError as e:  # the drawing still helps to see why the run failed
            notes.append(f"the run failed: {e}")
    doc["notes"] = notes
    return Viewer(doc)


def _add_run(doc, model: Model, node_ids: dict, feeds: dict, compare: str | None) -> None:
    from . import overlay

    stats, times, values = overlay.run_overlay(model, feeds, node_ids)
    main = doc["graphs"][0]
    for name, s in stats.items():
        if name in main["values"]:
            main["values"][name]["run"] = s
    for node in main["nodes"]:
        if node["id"] in times:
            node["time"] = times[node["id"]]
    doc["run"] = {"inputs": {k: list(getattr(v, "shape", ())) for k, v in feeds.items()}}
    if compare is not None:
        _add_comparison(doc, model, compare, feeds, values)


def _add_comparison(doc, model: Model, against: str, feeds, values) -> None:
    from . import overlay
    from .stats import _num

    reference = overlay.reference_values(model, against, feeds, list(values))
    errors = overlay.compare_values(values, reference)
    main = doc["graphs"][0]
    for name, err in errors.items():
        if name in main["values"]:
            main["values"][name]["error"] = err
    worst, first = overlay.node_errors(main["nodes"], errors)
    for node in main["nodes"]:
        if node["id"] in worst:
            node["error"] = _num(worst[node["id"]])
    doc["compare"] = {
        "against": against if against == "onnxruntime" else os.path.basename(against),
        "first": first,
        "compared": len(errors),
        "atol": overlay.ATOL,
        "rtol": overlay.RTOL,
    }


def _as_model(model) -> Model:
    from ...serde import load, loads

    if isinstance(model, Model):
        return model
    if isinstance(model, bytes | bytearray):
        return loads(bytes(model))
    if isinstance(model, str | os.PathLike):
        return load(model)
    raise InvalidArgument(
        f"view() takes a path, bytes or an onyx.ir.Model, not {type(model).__name__}"
    )


def _feeds(model: Model, inputs, seed: int) -> dict[str, Any]:
    """The given inputs (a dict or an .npz path) and random data for the others."""
    from . import overlay

    given: dict[str, Any] = {}
    if isinstance(inputs, str | os.PathLike):
        given = overlay.load_inputs(os.fspath(inputs))
    elif isinstance(inputs, dict):
        given = dict(inputs)
    return {**overlay.default_inputs(model, seed, skip=set(given)), **given}


def render_page(document: dict[str, Any]) -> str:
    """The one HTML file: template with the stylesheet, the script and the document inlined."""
    template = (STATIC / "page.html").read_text(encoding="utf-8")
    data = json.dumps(document, separators=(",", ":"), allow_nan=False)
    # "</script" or "<!--" in a name would end or confuse the <script> element: JSON allows \u003c
    data = data.replace("<", "\\u003c")
    title = html.escape(document["model"].get("name") or "model")
    parts = {
        "/*STYLE*/": (STATIC / "viewer.css").read_text(encoding="utf-8"),
        "/*SCRIPT*/": (STATIC / "viewer.js").read_text(encoding="utf-8"),
        "/*DATA*/": data,
        "<!--TITLE-->": title,
    }
    for marker, text in parts.items():
        head, sep, tail = template.partition(marker)
        template = head + text + tail
    return template
