"""The checker's rules for what few models hold: local functions and calls to them, sparse
tensors, external data, each taking the checker (``checker._Checker``) first. Imported by
the checker when a model first holds one: a session validates every model it creates, and
most hold none of these (issue 23's cold start: 9 of the checker's 66 KiB of bytecode)."""

from __future__ import annotations

import os

from . import defs
from .checker import _sparse_name
from .ir import Function, Node, Tensor


def check_function(c, f: Function) -> None:
    where = f"function {f.domain}::{f.name}"
    c.need_ir("local_functions", where)
    if not f.name:
        c.report("function", "a local function has no name")
    if not f.domain:
        c.report("function", f"{where}: a local function needs a domain")
    names = list(f.attributes) + [a.name for a in f.attribute_defaults]
    if len(set(names)) != len(names):
        c.report("function", f"{where}: duplicate attribute names")
    for domain, version in f.opset_imports.items():
        mv = c.model.opset_imports.get(domain)
        if mv is not None and mv != version and defs.is_known_domain(domain):
            c.report(
                "function-opset",
                f"{where} imports {domain or 'ai.onnx'} {version} but the model imports {mv}",
            )
    c.check_opsets(f.opset_imports, where)
    c.check_graph(f.graph, {}, f.opset_imports or c.model.opset_imports, function=f, label=where)


def check_external(c, t: Tensor, gname: str, what: str) -> None:
    ext = t.external
    location = ext.get("location") if isinstance(ext, dict) else getattr(ext, "location", None)
    if not location:
        c.report("external-data", f"{what}: external data without a location", gname)
        return
    if os.path.isabs(location) or location.startswith(("/", "\\")):
        c.report("external-data", f"{what}: location {location!r} is absolute", gname)
        return
    norm = os.path.normpath(location)
    if norm == ".." or norm.startswith(".." + os.sep) or norm.startswith("../"):
        c.report("external-data", f"{what}: location {location!r} leaves the model folder", gname)
        return
    base = c.model.base_dir
    if base is not None:
        path = os.path.join(base, norm)
        if c.real_base is None:
            c.real_base = os.path.realpath(base)
        real_base = c.real_base
        if not os.path.realpath(path).startswith(real_base + os.sep):
            c.report(
                "external-data", f"{what}: location {location!r} leaves the model folder", gname
            )
        elif not os.path.isfile(path):
            c.report("external-data", f"{what}: file {location!r} does not exist", gname)


def check_sparse(c, sp, gname: str, what: str = "") -> None:
    what = what or f"sparse tensor {_sparse_name(sp)!r}"
    values = getattr(sp, "values", None)
    indices = getattr(sp, "indices", None)
    dims = tuple(getattr(sp, "dims", ()) or ())
    if values is None:
        c.report("sparse-tensor", f"{what} has no values", gname)
        return
    c.check_tensor(values, gname, what + " values")
    if len(values.shape) != 1:
        c.report("sparse-tensor", f"{what}: values must be 1-D", gname)
        return
    nnz = values.shape[0]
    if any(d <= 0 for d in dims) or not dims:
        c.report("sparse-tensor", f"{what}: dims {list(dims)} must be positive", gname)
        return
    if indices is None:
        if nnz:
            c.report("sparse-tensor", f"{what} has values but no indices", gname)
        return
    idx = indices.numpy()
    import numpy as np

    if idx.dtype != np.int64:
        c.report("sparse-tensor", f"{what}: indices must be int64", gname)
        return
    size = int(np.prod(dims))
    if idx.ndim == 1:
        if idx.shape[0] != nnz:
            c.report("sparse-tensor", f"{what}: {idx.shape[0]} indices, {nnz} values", gname)
        elif nnz and (idx.min() < 0 or idx.max() >= size):
            c.report("sparse-tensor", f"{what}: an index is out of range", gname)
        elif nnz > 1 and np.any(np.diff(idx) <= 0):
            c.report("sparse-tensor", f"{what}: indices are not strictly increasing", gname)
    elif idx.ndim == 2:
        if idx.shape != (nnz, len(dims)):
            c.report(
                "sparse-tensor",
                f"{what}: indices shape {list(idx.shape)} must be [{nnz}, {len(dims)}]",
                gname,
            )
        elif nnz and (np.any(idx < 0) or np.any(idx >= np.array(dims))):
            c.report("sparse-tensor", f"{what}: an index is out of range", gname)
        elif nnz > 1 and np.any(np.diff(np.ravel_multi_index(idx.T, dims)) <= 0):
            c.report("sparse-tensor", f"{what}: indices are not in increasing order", gname)
    else:
        c.report("sparse-tensor", f"{what}: indices must be 1-D or 2-D", gname)


def check_call(c, node: Node, gname: str) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    f = next(f for f in c.model.functions.values() if (f.domain, f.name) == (domain, node.op_type))
    if len(node.inputs) > len(f.graph.inputs):
        c.report(
            "input-count",
            f"{len(node.inputs)} inputs, function takes at most {len(f.graph.inputs)}",
            gname,
            node,
        )
    if len(node.outputs) > len(f.graph.outputs):
        c.report(
            "output-count",
            f"{len(node.outputs)} outputs, function has {len(f.graph.outputs)}",
            gname,
            node,
        )
    known = set(f.attributes) | {a.name for a in f.attribute_defaults}
    for name in node.attributes:
        if name not in known:
            c.report("attribute-name", f"function has no attribute {name!r}", gname, node)
