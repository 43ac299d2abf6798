"""Runs of small scikit-learn models keep the GIL throughout (docs/reliability.md, "Runs that
keep the GIL"): numpy's argmax, searchsorted, take and fancy indexing, and every ctypes call
through a CDLL, let the GIL go at each call whatever its size, and each release in a run of
tens of microseconds woke a thread waiting for the GIL, which took it from the run.

Releases are counted by an LD_PRELOAD shim in front of CPython's PyEval_SaveThread (numpy's and
ctypes' extension modules reach it through their PLT), in a child process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import onyx
from onyx.runtime import native
from onyx.runtime.kernels.ml._common import row_argmax
from onyx.runtime.kernels.ml.preprocess import _sorted_position, _take_columns

ZOO = Path(__file__).parent / "models" / "zoo"

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
static void *(*real)(void);
static long count;
static int counting;
void *PyEval_SaveThread(void) {
    if (!real) real = (void *(*)(void))dlsym(RTLD_NEXT, "PyEval_SaveThread");
    if (counting) count++;
    return real();
}
void gil_count_start(void) { count = 0; counting = 1; }
long gil_count_stop(void) { counting = 0; return count; }
"""

CHILD = """
import ctypes, sys, threading
import numpy as np
import onyx

shim = ctypes.PyDLL(sys.argv[1])
shim.gil_count_stop.restype = ctypes.c_long
path = sys.argv[2]
sess = onyx.InferenceSession(path)
with np.load(path[: -len(".onnx")] + ".npz", allow_pickle=True) as saved:
    feeds = {i.name: saved["in:" + i.name] for i in sess.get_inputs()}
stop = threading.Event()
other = threading.Thread(target=stop.wait)  # (another thread: a run then takes its run slot's
other.start()                               # ways, a turn or the tiny rule's)
for _ in range(40):  # (the plan compiles its runner at the second run; the Pace learns)
    sess.run(None, feeds)
shim.gil_count_start()
for _ in range(100):
    sess.run(None, feeds)
print(shim.gil_count_stop())
stop.set()
other.join()
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    if not sys.platform.startswith("linux"):
        pytest.skip("LD_PRELOAD counting: Linux only")
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip("no C compiler to build the counting shim")
    out = tmp_path_factory.mktemp("gil") / "gil_count.so"
    source = out.with_suffix(".c")
    source.write_text(SHIM)
    done = subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(out), str(source), "-ldl"])
    if done.returncode:
        pytest.skip("the counting shim does not build here")
    return out


def _releases(shim: Path, model: str | Path) -> int:
    """Releases in 100 runs of the zoo's ``model`` (or the model at that path, its feeds in
    the .npz beside it)."""
    path = model if isinstance(model, Path) else ZOO / f"{model}.onnx"
    env = {**os.environ, "LD_PRELOAD": str(shim)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(shim), str(path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.parametrize(
    "model",
    [
        "skl2onnx_coltrans_onehot_logreg",  # (OneHotEncoder's search, LinearClassifier's argmax)
        "skl2onnx_coltrans_onehot_svc",  # (an SVM's small native call)
        "skl2onnx_coltrans_onehot_gbr",  # (a forest's small native call)
        "skl2onnx_coltrans_ordinal_forest",
    ],
)
@pytest.mark.skipif(not native.available(), reason="numpy's argmax and searchsorted release it")
def test_a_small_scikit_learn_models_runs_keep_the_gil(shim, model):
    assert _releases(shim, model) == 0


def test_the_counting_shim_counts_a_release(shim, tmp_path):
    """(the shim sees numpy's releases: the test above can fail)"""
    script = tmp_path / "probe.py"
    script.write_text(
        "import ctypes, sys, numpy as np\n"
        "shim = ctypes.PyDLL(sys.argv[1]); shim.gil_count_stop.restype = ctypes.c_long\n"
        "a = np.arange(6.0).reshape(2, 3)\n"
        "shim.gil_count_start(); a.argmax(axis=1); a.argmax(axis=1)\n"
        "print(shim.gil_count_stop())\n"
    )
    env = {**os.environ, "LD_PRELOAD": str(shim)}
    done = subprocess.run([sys.executable, str(script), str(shim)], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == 2


def _with_nans_and_ties(rng, shape, dtype) -> np.ndarray:
    x = rng.integers(-3, 3, size=shape).astype(dtype)  # (ties everywhere)
    if np.dtype(dtype).kind == "f":
        x.flat[rng.choice(x.size, size=x.size // 5, replace=False)] = np.nan
        x.flat[rng.choice(x.size, size=x.size // 7, replace=False)] = -0.0
        x.flat[rng.choice(x.size, size=x.size // 9, replace=False)] = np.inf
    return x


@pytest.fixture(autouse=True)
def another_thread():
    """Another thread alive, as in a served process: small inputs then take trees.c's
    GIL-keeping calls (alone, numpy's: _common.other_threads), whose bits these tests check."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    yield
    stop.set()
    other.join()


@pytest.mark.parametrize("alone", [True, False])
def test_small_calls_keep_the_gil_only_with_other_threads(monkeypatch, alone):
    """Alone, numpy's argmax and searchsorted run (0.2 us against trees.c's 1.5 us a one-row
    call: a GIL release then wakes nobody); with other threads about, trees.c's."""
    from onyx.runtime.kernels.ml import _common

    called = []
    for name in ("argmax_rows", "sorted_position"):
        monkeypatch.setattr(native, name, lambda *a, name=name: called.append(name))
    monkeypatch.setattr(_common, "other_threads", lambda: 0 if alone else 1)
    x = np.array([[0.5, 2.0]], np.float32)
    assert row_argmax(x).tolist() == [1]
    assert _sorted_position(np.array([1.0, 3.0]), np.array([[2.0]])).tolist() == [[1]]
    assert called == ([] if alone else ["argmax_rows", "sorted_position"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (16, 2), (16, 3), (5, 7), (0, 3), (36, 7)])
def test_row_argmax_is_argmaxs_index(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(20):
        x = _with_nans_and_ties(rng, shape, dtype)
        got = row_argmax(x)
        assert got.dtype == np.intp and np.array_equal(got, x.argmax(axis=1))
    if native.available() and np.dtype(dtype).kind == "f":  # (trees.c's, not numpy's)
        assert native.argmax_rows(x) is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_sorted_position_is_searchsorteds(dtype):
    rng = np.random.default_rng(3)
    for keys in range(1, 9):
        for _ in range(10):
            unique = np.unique(_with_nans_and_ties(rng, (keys,), dtype))
            x = _with_nans_and_ties(rng, (6, 1), dtype)
            got = _sorted_position(unique, x)
            assert got.dtype == np.intp
            assert np.array_equal(got, np.searchsorted(unique, x))
            if native.available():  # (trees.c's, not numpy's)
                assert native.sorted_position(unique, x) is not None


def test_sorted_position_of_strings_is_searchsorteds():
    unique = np.unique(np.array(["b", "a", "zz", "c", "", "a\u00e9", "\U0001f600"]))
    for x in (
        np.array([["a"], ["bb"], [""], ["zzz"], ["c"], ["\u00e9"], ["a\u00e9"], ["z"]]),
        np.array(["a", "b", "y", "\U0001f600\U0001f600"]),
        np.array([["zz"]]),
        np.array(["a\u00e9b", "aa", "a", "ab"]),
    ):
        got = _sorted_position(unique, x)
        assert got.shape == x.shape and np.array_equal(got, np.searchsorted(unique, x))
        if native.available():  # (trees.c's, not numpy's)
            assert native.sorted_position(unique, x) is not None


@pytest.mark.parametrize(
    "indices", [[0], [3], [1, 2, 3], [0, 2, 4], [4, 2], [1, 1], [0, 3, 4], [5], [0, 1, 2, 3, 4, 5]]
)
def test_take_columns_is_takes(indices):
    x = np.arange(24.0).reshape(4, 6)
    y = np.array(indices, np.int64)
    got = _take_columns(x, y, y)
    assert np.array_equal(got, x.take(y, axis=-1)) and got.flags.owndata
    assert np.array_equal(_take_columns(x[0], y, y), x[0].take(y, axis=-1))


@pytest.mark.skipif(not native.available(), reason="native library not built")
@pytest.mark.parametrize("shape", [(4000, 4000), (4094, 2), (2, 4094), (64, 64), (4095, 1)])
def test_row_argmax_of_a_large_input_lets_the_gil_go(shape):
    """KEPT_ELEMENTS bounds the elements of a GIL-keeping argmax (not each of rows and cols:
    a 4000 x 4000 input was copied and searched with the GIL held, other threads stopped)."""
    x = np.zeros(shape, np.float32)
    assert native.argmax_rows(x) is None
    assert np.array_equal(row_argmax(x), x.argmax(axis=1))


@pytest.mark.skipif(not native.available(), reason="native library not built")
def test_row_argmax_keeps_the_gil_only_for_small_inputs():
    """argmax_rows serves fewer than KEPT_ELEMENTS elements (docs/reliability.md): a larger x
    (each dimension small, their product not) goes to numpy's argmax, which lets the GIL go,
    rather than holding it for millions of comparisons."""
    from onyx.runtime.native import trees

    side = 100  # (100 x 100 = 10000 elements, each side < KEPT_ELEMENTS)
    assert side * side >= trees.KEPT_ELEMENTS
    assert native.argmax_rows(np.zeros((side, side), np.float32)) is None
    assert native.argmax_rows(np.zeros((4, 9), np.float32)) is not None


def test_sorted_position_of_byte_swapped_strings_is_searchsorteds():
    """A string x (or keys) in big-endian UCS4 ('>U'), as a caller may feed it and astype(str)
    keeps it: trees.c compares native code points, so such arrays go to numpy."""
    unique = np.unique(np.array(["a", "b", "c", "\u00ff", "\u0100"]))
    x = np.array(["b", "c", "\u0100", "\u00ff", "zz"])
    for k, v in (
        (unique, x.astype(">U2")),
        (unique.astype(">U1"), x),
        (unique.astype(">U1"), x.astype(">U2")),
    ):
        got = _sorted_position(k, v)
        assert np.array_equal(got, np.searchsorted(k, v)), (k.dtype, v.dtype, got)


def _forest(tmp_path: Path, trees: int, depth: int, rows: int) -> Path:
    """A scikit-learn regression forest of ``trees`` trees of ``depth`` levels, saved with
    feeds of ``rows`` rows (``_releases`` runs it)."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 6)).astype(np.float32)
    y = x @ rng.standard_normal(6) + rng.standard_normal(400)
    forest = RandomForestRegressor(trees, max_depth=depth, random_state=0).fit(x, y)
    onx = skl2onnx.to_onnx(forest, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    path = tmp_path / f"forest_{trees}_{depth}.onnx"
    path.write_bytes(onx.SerializeToString())
    np.savez(path.with_suffix(".npz"), **{"in:X": x[:rows]})
    return path


@pytest.mark.skipif(not native.available(), reason="the forests' native calls")
def test_a_large_forests_call_on_few_rows_lets_the_gil_go(shim, tmp_path):
    """A forest's call keeps the GIL by its work (rows x trees x levels: trees.KEPT_STEPS),
    not its rows alone: 16 rows of a forest of 100 trees of 8 levels held the GIL for as long
    as the forest took, other threads stopped. A small forest's 16 rows still keep it."""
    from onyx.runtime.native import trees

    assert _releases(shim, _forest(tmp_path, 100, 8, 16)) >= 100  # (a call each run)
    assert _releases(shim, _forest(tmp_path, 4, 3, 16)) == 0
    assert 16 * 100 * 8 > trees.KEPT_STEPS >= 16 * 4 * 3


@pytest.mark.skipif(not native.available(), reason="SmallCall's native call")
def test_a_session_whose_native_calls_let_the_gil_go_is_not_gil_bound(monkeypatch):
    """(Pace.switched) With the tiny rule on, a forest scored on more rows than it keeps the
    GIL for (20 rows, a CDLL call each run: native._core.let_go) goes back to turns; the
    coltrans pipeline, which keeps the GIL, stays without."""
    from onyx.runtime import concurrency

    monkeypatch.setattr(concurrency, "TINY_RUN_SECONDS", 10.0)  # (every run tiny: a loaded
    monkeypatch.setattr(concurrency, "SHORT_RUN_SECONDS", 10.0)  # machine stretches them)
    no_switches = lambda: (0, 0)  # noqa: E731  (let_go alone)
    monkeypatch.setattr(concurrency, "_switches", no_switches, raising=False)
    paces = {}
    for model in ("onnxmltools_xgboost_binary", "skl2onnx_coltrans_onehot_logreg"):
        sess = onyx.InferenceSession(str(ZOO / f"{model}.onnx"))
        with np.load(ZOO / f"{model}.npz", allow_pickle=True) as saved:
            feeds = {i.name: saved["in:" + i.name] for i in sess.get_inputs()}
        for _ in range(80):
            sess.run(None, feeds)
        paces[model] = sess._pace.gil_bound  # noqa: SLF001
    assert paces == {"onnxmltools_xgboost_binary": False, "skl2onnx_coltrans_onehot_logreg": True}
