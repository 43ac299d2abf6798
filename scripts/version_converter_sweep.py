"""Every onnx backend node-suite model converted to other ai.onnx opsets by onyx and by
onnx.version_converter; onyx's conversions run by onyx (and by onnxruntime up to the opset it
supports) against the cases' expected outputs. Prints the counts docs/tools.md quotes.

    python scripts/version_converter_sweep.py                     # opsets 7,9,...,25,28
    python scripts/version_converter_sweep.py 11,13 softmax       # some opsets and cases
"""

from __future__ import annotations

import collections
import json
import re
import sys
import time
import warnings

import numpy as np
import onnx
import onnx.backend.test.loader
import onnx.numpy_helper
import onnx.version_converter
import onnxruntime as ort

import onyx

ORT_MAX_OPSET = 23


def _array(x):
    # (a numpy scalar feed becomes a 0-d array: onnxruntime takes arrays only)
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return x if x is None else np.asarray(x)


def _close(got, want, rtol, atol) -> bool:
    try:
        for g, w in zip(got, want):
            if isinstance(w, list):
                for a, b in zip(g, w):
                    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)
            elif w is None:
                assert g is None
            elif np.asarray(w).dtype.kind in "OSU":  # strings: equal
                assert np.array_equal(np.asarray(g, dtype=object), np.asarray(w, dtype=object))
            else:
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol,
                                           equal_nan=True)  # fmt: skip
        return True
    except AssertionError:
        return False


def _cause(message: str) -> str:
    """'(Op) reason' without the node's name, so refusals group by operator and cause."""
    head, _, why = message.partition(": ")
    op = re.search(r"\((\w+)\)$", head)
    return f"({op.group(1)}) {why[:90]}" if op else message[:100]


def _check(m, c, feeds, outs, t, stats, wrong) -> None:
    """Run onyx's conversion by onyx (and onnxruntime up to the opset it supports)."""
    data = onyx.dumps(m)
    try:
        got = onyx.InferenceSession(data).run(None, feeds)
        ok = _close(got, outs, c.rtol, c.atol)
    except Exception as e:  # (a conversion onyx cannot run is wrong, not refused)
        got, ok = None, False
        wrong.append((c.name, t, repr(e)[:120]))
    if ok:
        stats["onyx's conversion correct (run by onyx)"] += 1
    elif got is not None:
        wrong.append((c.name, t))
    if t <= ORT_MAX_OPSET:
        try:
            sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
            got = sess.run(None, feeds)
        except Exception:
            stats["onyx's conversion refused by onnxruntime"] += 1
            return
        stats["onyx's conversion run by onnxruntime"] += 1
        stats["onyx's conversion correct (run by onnxruntime)"] += _close(got, outs, c.rtol, c.atol)


def _check_onnx(data: bytes, c, feeds, outs, t, stats) -> None:
    """onnx.version_converter's conversion run by onyx and by onnxruntime, the same way."""
    try:
        got = onyx.InferenceSession(data).run(None, feeds)
        stats["onnx's conversion correct (run by onyx)"] += _close(got, outs, c.rtol, c.atol)
    except Exception:
        pass
    if t <= ORT_MAX_OPSET:
        try:
            got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
        except Exception:
            stats["onnx's conversion refused by onnxruntime"] += 1
            return
        stats["onnx's conversion run by onnxruntime"] += 1
        stats["onnx's conversion correct (run by onnxruntime)"] += _close(got, outs, c.rtol, c.atol)


def main(argv: list[str]) -> None:
    targets = (
        [int(t) for t in argv[0].split(",")] if argv else [7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 28]
    )
    pattern = argv[1] if len(argv) > 1 else ""
    ort.set_default_logger_severity(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in onnx.backend.test.loader.load_node_model_tests()
                 if pattern in c.name and "bernoulli" not in c.name and c.data_sets]  # fmt: skip
    stats: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    wrong = []
    t0 = time.time()
    warnings.simplefilter("ignore")
    for c in cases:
        src = next((o.version for o in c.model.opset_import if o.domain in ("", "ai.onnx")), None)
        ins, outs = c.data_sets[0]
        inits = {t.name for t in c.model.graph.initializer}
        names = [i.name for i in c.model.graph.input if i.name not in inits]
        feeds = {k: _array(v) if not isinstance(v, list) else v for k, v in zip(names, ins)}
        outs = [_array(o) if not isinstance(o, list) else o for o in outs]
        try:
            ok = _close(onyx.InferenceSession(c.model.SerializeToString()).run(None, feeds), outs,
                        c.rtol, c.atol)  # fmt: skip
        except Exception:
            ok = False
        if src is None or not ok:
            stats["cases onyx does not pass as given (skipped)"] += 1
            continue
        for t in targets:
            if t == src:
                continue
            stats["pairs"] += 1
            try:
                m = onyx.convert_version(onyx.loads(c.model.SerializeToString()), t)
            except onyx.OnyxError as e:
                m = None
                stats["onyx refused (OnyxError)"] += 1
                reasons[_cause(str(e))] += 1
            except Exception as e:
                m = None
                stats["onyx crashed"] += 1
                wrong.append((c.name, src, t, repr(e)[:120]))
            if m is not None:
                stats["onyx converted"] += 1
                _check(m, c, feeds, outs, t, stats, wrong)
            try:
                p = onnx.version_converter.convert_version(c.model, t)
            except Exception:
                stats["onnx refused or failed"] += 1
                continue
            stats["onnx converted"] += 1
            _check_onnx(p.SerializeToString(), c, feeds, outs, t, stats)
    print(json.dumps(stats, indent=1))
    print(f"{time.time() - t0:.0f} s")
    print("most frequent refusals:")
    for r, k in reasons.most_common(40):
        print(f"  {k:5d}  {r}")
    print(f"wrong or crashed: {len(wrong)}")
    for w in wrong[:30]:
        print("  ", w)


if __name__ == "__main__":
    main(sys.argv[1:])
