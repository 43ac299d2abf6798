"""The classes whose methods are written once instead of compiled by @dataclass at import
(issue 23's cold start) keep what @dataclass gave them, and a quiet session never imports
logging."""

import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import onyx
from onyx.checker import Problem
from onyx.inference.engine import Data
from onyx.ir.attr import Attr, AttrType
from onyx.runtime.options import RunOptions, SessionLog, SessionOptions

TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"


def test_options_init_takes_fields_by_position_and_name():
    r = RunOptions(2, logid="x")
    assert (r.log_severity_level, r.logid, r.terminate) == (2, "x", False)
    assert repr(r) == (
        "RunOptions(log_severity_level=2, log_verbosity_level=0, logid='x', terminate=False, "
        "only_execute_path_to_fetches=False)"
    )
    with pytest.raises(TypeError, match="positional"):
        RunOptions(1, 2, "", False, False, {}, 7)
    with pytest.raises(TypeError, match="multiple values"):
        RunOptions(1, log_severity_level=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        RunOptions(nope=1)


def test_options_compare_by_value_copy_and_warn_as_dataclasses():
    a, b = SessionOptions(), SessionOptions()
    assert a == b and a.disabled_optimizers is not b.disabled_optimizers
    a.add_session_config_entry("session.disable_prepacking", "1")  # each its own dict
    with pytest.raises(RuntimeError):
        b.get_session_config_entry("session.disable_prepacking")
    a = SessionOptions()
    b.intra_op_num_threads = 3
    assert a != b
    with pytest.raises(TypeError):
        hash(a)
    c = dataclasses.replace(b, disabled_optimizers=["x"])
    assert (c.intra_op_num_threads, c.disabled_optimizers) == (3, ["x"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SessionOptions(execution_mode=1)  # an ignored field warns from the constructor too
    assert len(caught) == 1


def test_value_classes_keep_dataclass_equality_and_repr():
    assert Attr("a", AttrType.INT, 1) == Attr("a", AttrType.INT, 1, extras=object())
    assert Attr("a", AttrType.INT, 1) != Attr("a", AttrType.INT, 2)
    assert repr(Data([1, "n"])) == "Data(dims=[1, 'n'], scalar=False)"
    p = Problem("ssa", "twice", node="n")
    assert p == Problem("ssa", "twice", "", "n") and hash(p) == hash(
        Problem("ssa", "twice", "", "n")
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.rule = "x"


def test_a_quiet_session_does_not_import_logging():
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "i = s.get_inputs()[0]\n"
        "s.run(None, {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)})\n"
        "print('logging' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_logging_configured_later_still_decides():
    import logging

    log = SessionLog()  # the default severity: warnings and worse
    assert not log.enabled(logging.INFO)
    logging.getLogger("onyx").setLevel(logging.INFO)
    try:
        assert log.enabled(logging.INFO)
    finally:
        logging.getLogger("onyx").setLevel(logging.NOTSET)
