"""Session factories for bench_batch.py, in a module of their own so that every engine's
workers can import them by name (Spark's broadcast unpickles with plain pickle, which finds a
function by its module; a function of ``__main__`` cannot be found there)."""

from __future__ import annotations


def onnxruntime_session(model_bytes, options):
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def onyx_session(model_bytes, options):
    import onyx

    so = onyx.SessionOptions()
    so.intra_op_num_threads = 1
    return onyx.InferenceSession(model_bytes, so)


RUNTIMES = {"onyx": onyx_session, "onnxruntime": onnxruntime_session}
