"""The optimized-model cache (runtime/model_cache.py): off unless asked for, a hit makes the
same session without the checks and the optimizer, and whatever the key cannot follow is
never cached."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import model_cache, native, session

F = TensorProto.FLOAT
TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(model_cache.ENV, str(folder))
    return folder


@pytest.fixture
def optimizer_calls(monkeypatch):
    calls = []
    real = session.InferenceSession._prepare  # noqa: SLF001  (the optimizer's hook)

    def counted(self, model, owned=False):
        calls.append(model)
        return real(self, model, owned)

    monkeypatch.setattr(session.InferenceSession, "_prepare", counted)
    return calls


def _feed(sess) -> dict:
    rng = np.random.default_rng(0)
    return {
        i.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in i.shape]).astype(
            np.float32
        )
        for i in sess.get_inputs()
    }


def _entries(cache: Path) -> list[str]:
    """The cache's model entries (each has its derived types beside it)."""
    if not cache.exists():
        return []
    return [p.name for p in cache.iterdir() if not p.name.endswith(".types.onnx")]


def _copy(tmp_path, source=TINY) -> str:
    path = tmp_path / "model.onnx"
    path.write_bytes(Path(source).read_bytes())
    return str(path)


def test_off_unless_asked(tmp_path, monkeypatch, optimizer_calls):
    monkeypatch.delenv(model_cache.ENV, raising=False)
    path = _copy(tmp_path)
    onyx.InferenceSession(path)
    onyx.InferenceSession(path)
    assert len(optimizer_calls) == 2
    assert os.listdir(tmp_path) == ["model.onnx"]


def test_a_hit_skips_the_optimizer_and_runs_the_same(tmp_path, cache, optimizer_calls):
    path = _copy(tmp_path)
    first = onyx.InferenceSession(path)
    assert len(optimizer_calls) == 1 and len(_entries(cache)) == 1
    hit = onyx.InferenceSession(path)
    assert len(optimizer_calls) == 1  # (the cached model, already optimized)
    feed = _feed(first)
    for a, b in zip(first.run(None, feed), hit.run(None, feed)):
        np.testing.assert_array_equal(a, b)
    assert [(i.name, i.type, i.shape) for i in hit.get_inputs()] == [
        (i.name, i.type, i.shape) for i in first.get_inputs()
    ]
    assert [o.name for o in hit.get_outputs()] == [o.name for o in first.get_outputs()]
    assert hit.get_modelmeta().producer_name == first.get_modelmeta().producer_name
    assert [s.node.op_type for s in hit.plan.steps] == [s.node.op_type for s in first.plan.steps]
    # the first run's output check: the types kept beside the entry, as inference gives them
    assert hit._cached_types()  # noqa: SLF001
    assert hit._output_check.expected == first._output_check.expected  # noqa: SLF001
    assert first._output_check.expected  # noqa: SLF001


def test_a_hit_without_its_types_infers_them(tmp_path, cache):
    path = _copy(tmp_path)
    first = onyx.InferenceSession(path)
    for p in cache.glob("*.types.onnx"):
        p.unlink()
    hit = onyx.InferenceSession(path)
    assert hit._cached_types() is None  # noqa: SLF001
    feed = _feed(first)
    np.testing.assert_array_equal(first.run(None, feed)[0], hit.run(None, feed)[0])
    assert hit._output_check.expected == first._output_check.expected  # noqa: SLF001


def test_the_config_entry_names_a_folder(tmp_path, monkeypatch, optimizer_calls):
    monkeypatch.delenv(model_cache.ENV, raising=False)
    path = _copy(tmp_path)
    so = onyx.SessionOptions()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an entry onyx honours: no "ignored" warning)
        so.add_session_config_entry(model_cache.CONFIG_KEY, str(tmp_path / "c"))
    onyx.InferenceSession(path, so)
    onyx.InferenceSession(path, so)
    assert len(optimizer_calls) == 1
    assert len(_entries(tmp_path / "c")) == 1


def test_a_changed_file_misses(tmp_path, cache, optimizer_calls):
    path = _copy(tmp_path)
    onyx.InferenceSession(path)
    model = onnx.load(path)
    model.producer_name = "changed"
    onnx.save(model, path)
    sess = onyx.InferenceSession(path)
    assert len(optimizer_calls) == 2
    assert sess.get_modelmeta().producer_name == "changed"


def test_a_file_rewritten_in_place_with_its_times_set_back_misses(tmp_path, cache, optimizer_calls):
    """Same path, size, modification time and inode (cp -p over it, tar, rsync -t)."""
    path = _copy(tmp_path)
    before = os.stat(path)
    first = onyx.InferenceSession(path)
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0x10  # (a weight)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    again = onyx.InferenceSession(path)
    assert len(optimizer_calls) == 2
    feed = _feed(first)
    assert not np.array_equal(first.run(None, feed)[0], again.run(None, feed)[0])


def test_a_file_keeps_one_entry(tmp_path, cache):
    path = _copy(tmp_path)
    other = str(tmp_path / "other.onnx")
    Path(other).write_bytes(Path(path).read_bytes())
    onyx.InferenceSession(other)
    onyx.InferenceSession(path)
    model = onnx.load(path)
    model.producer_name = "changed"
    onnx.save(model, path)
    onyx.InferenceSession(path)  # (a new entry: the old one of this file goes)
    assert len(_entries(cache)) == 2
    assert len(os.listdir(cache)) == 4  # (each with its types)
    assert onyx.InferenceSession(path).get_modelmeta().producer_name == "changed"


def test_other_options_miss(tmp_path, cache, optimizer_calls):
    path = _copy(tmp_path)
    onyx.InferenceSession(path)
    so = onyx.SessionOptions()
    so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_ENABLE_BASIC
    onyx.InferenceSession(path, so)
    onyx.InferenceSession(path, disabled_optimizers=["ConvBNFusion"])
    assert len(optimizer_calls) == 3  # (each entry replaces the last: one a file)
    assert len(_entries(cache)) == 1


def test_what_the_key_cannot_follow_is_not_cached(tmp_path, cache, optimizer_calls):
    path = _copy(tmp_path)
    onyx.InferenceSession(Path(path).read_bytes())  # bytes
    onyx.InferenceSession(onyx.load(path))  # an IR model
    so = onyx.SessionOptions()
    so.add_free_dimension_override_by_name("N", 1)
    onyx.InferenceSession(path, so)
    so = onyx.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onyx.InferenceSession(path, so)
    so = onyx.SessionOptions()
    so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    onyx.InferenceSession(path, so)
    assert not _entries(cache)


def test_external_data_is_not_cached(tmp_path, cache):
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4])],
        [w],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = str(tmp_path / "ext.onnx")
    onnx.save(model, path, save_as_external_data=True, size_threshold=0, location="w.bin")
    onyx.InferenceSession(path)
    assert not _entries(cache)


def test_a_damaged_entry_is_made_again(tmp_path, cache, optimizer_calls):
    path = _copy(tmp_path)
    first = onyx.InferenceSession(path)
    (entry,) = [cache / name for name in _entries(cache)]
    entry.write_bytes(b"\x00garbage")
    again = onyx.InferenceSession(path)
    assert len(optimizer_calls) == 2
    feed = _feed(first)
    np.testing.assert_array_equal(first.run(None, feed)[0], again.run(None, feed)[0])
    assert entry.stat().st_size > 100  # (written again, whole)


def _flip_a_middle_bit(data: bytes) -> bytes:
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x10  # (tiny_cnn's entry: in a weight)
    return bytes(damaged)


@pytest.mark.parametrize(
    "damage",
    [
        # (cut short before its graph: still a model to a parser, one without a graph)
        lambda data: onnx.ModelProto(
            ir_version=8, opset_import=[helper.make_opsetid("", 17)]
        ).SerializeToString(),
        lambda data: data[: len(data) // 2],
        _flip_a_middle_bit,  # (still parses: other weights)
    ],
    ids=["its header only", "cut short", "a bit flipped"],
)
def test_an_entry_that_fails_its_check_is_made_again(tmp_path, cache, optimizer_calls, damage):
    path = _copy(tmp_path)
    first = onyx.InferenceSession(path)
    (entry,) = [cache / name for name in _entries(cache)]
    entry.write_bytes(damage(entry.read_bytes()))
    again = onyx.InferenceSession(path)
    assert len(optimizer_calls) == 2
    feed = _feed(first)
    np.testing.assert_array_equal(first.run(None, feed)[0], again.run(None, feed)[0])
    assert model_cache.read(onyx.SessionOptions(), entry.name[: -len(".onnx")]) is not None


def test_damaged_kept_types_are_inferred_again(tmp_path, cache):
    path = _copy(tmp_path)
    first = onyx.InferenceSession(path)
    (types,) = cache.glob("*.types.onnx")
    types.write_bytes(_flip_a_middle_bit(types.read_bytes()))
    hit = onyx.InferenceSession(path)
    assert hit._cached_types() is None  # noqa: SLF001
    feed = _feed(first)
    np.testing.assert_array_equal(first.run(None, feed)[0], hit.run(None, feed)[0])
    assert hit._output_check.expected == first._output_check.expected  # noqa: SLF001


def test_a_folder_that_cannot_be_written_changes_nothing(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(model_cache.ENV, str(blocker / "cache"))
    sess = onyx.InferenceSession(_copy(tmp_path))
    assert sess.run(None, _feed(sess))[0].shape[-1] == 10


def test_a_model_that_warns_is_not_cached_and_still_warns(tmp_path, cache):
    nodes = [  # out of topological order: onnxruntime runs it, onyx warns
        helper.make_node("Relu", ["a"], ["y"]),
        helper.make_node("Neg", ["x"], ["a"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    path = str(tmp_path / "unsorted.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    for _ in range(2):
        with pytest.warns(onyx.validation.ValidationWarning):
            sess = onyx.InferenceSession(path)
    assert not _entries(cache)
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [0.0, 2.0])


def test_keys_follow_the_code_and_native_settings(tmp_path, cache, monkeypatch):
    path = _copy(tmp_path)
    so = onyx.SessionOptions()
    base = model_cache.key(path, so)
    assert base == model_cache.key(path, so)
    other = "1" if os.environ.get("ONYX_NATIVE") == "0" else "0"
    monkeypatch.setenv("ONYX_NATIVE", other)  # (any ONYX_* setting is in the key)
    assert model_cache.key(path, so) != base
    monkeypatch.undo()
    monkeypatch.setenv(model_cache.ENV, str(cache))
    assert model_cache.key(path, so) == base
    if native.available():
        with native.disabled():  # (a library turned off at run time, as tests do)
            assert model_cache.key(path, so) != base
    monkeypatch.setattr(model_cache, "_code_digest", "another onyx")
    assert model_cache.key(path, so) != base


def test_the_folder_is_not_in_the_key(tmp_path, cache, monkeypatch, optimizer_calls):
    """Named by the environment or by the config entry, spelled either way: one entry."""
    path = _copy(tmp_path)
    onyx.InferenceSession(path)
    monkeypatch.setenv(model_cache.ENV, str(cache) + os.sep)
    onyx.InferenceSession(path)
    monkeypatch.delenv(model_cache.ENV)
    so = onyx.SessionOptions()
    so.add_session_config_entry(model_cache.CONFIG_KEY, str(cache))
    onyx.InferenceSession(path, so)
    assert len(optimizer_calls) == 1 and len(_entries(cache)) == 1


def test_a_hit_in_a_fresh_process_imports_no_checker_optimizer_or_inference(tmp_path, cache):
    """What a hit spares a cold start: the checker, the optimizer and the inference engine
    (the first run's output check takes the kept types), and hashlib's and tempfile's
    imports."""
    path = _copy(tmp_path)
    onyx.InferenceSession(path)
    code = (
        "import sys, numpy as np, onyx\n"
        "s = onyx.InferenceSession(sys.argv[1])\n"
        "s.run(None, {'image': np.zeros((1, 1, 28, 28), np.float32)})\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code, path],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, model_cache.ENV: str(cache)},
    )
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert "onyx.runtime.kernels.conv" in loaded  # (the probe sees what it loads)
    spared = {"onyx.checker", "onyx.optimizer", "onyx.inference", "hashlib", "tempfile"}
    assert not spared & loaded


def test_sessions_import_only_the_keyed_packages():
    """The key follows the source files of the packages a session imports: creating and
    running sessions of models of every kind must import nothing outside them (a pass or
    kernel moved elsewhere would change entries without changing their keys)."""
    models = Path(__file__).resolve().parent / "models"
    paths = [
        TINY,
        *(
            models / name
            for name in (
                "mobilenet_quant_qdq.onnx",
                "bert_quant_qoperator.onnx",
                "gpt_quant_dynamic.onnx",
                "lstm_dynamo_op18.onnx",
                "batch/lightgbm_classifier.onnx",
            )
        ),
    ]
    code = (
        "import sys, numpy as np, onyx\n"
        "for path in sys.argv[1:]:\n"
        "    s = onyx.InferenceSession(path)\n"
        "    feed = {}\n"
        "    for i in s.get_inputs():\n"
        "        shape = [d if isinstance(d, int) else 1 for d in i.shape]\n"
        "        kind = np.int64 if 'int64' in i.type else np.float32\n"
        "        feed[i.name] = np.ones(shape, kind)\n"
        "    s.run(None, feed)\n"
        "print(' '.join(m for m in sys.modules if m.startswith('onyx.')))\n"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, paths)], capture_output=True, text=True, cwd=root
    )
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = out.stdout.split()
    assert "onyx.optimizer.qdq" in loaded  # (the probe sees the optimizer's modules)
    top = {p.stem for p in (root / "onyx").glob("*.py")}
    outside = [
        m
        for m in loaded
        if m.split(".")[1] not in model_cache.KEYED_PACKAGES
        and not (m.count(".") == 1 and m.split(".")[1] in top)
    ]
    assert outside == []


def test_custom_kernels_in_the_registry_turn_the_cache_off(tmp_path, cache, optimizer_calls):
    path = _copy(tmp_path)
    so = onyx.SessionOptions()
    assert model_cache.key(path, so) is not None

    def relu(x):
        return np.maximum(x, 0)

    onyx.register_op("MyOwnOp", relu, domain="com.example")
    try:
        assert model_cache.key(path, so) is None  # (it might change what sessions make)
    finally:
        onyx.unregister_op("MyOwnOp", domain="com.example")
    assert model_cache.key(path, so) is not None  # (an op of its own, removed whole)
    so.register_custom_op("Relu", relu)  # (a session's own kernel: never cached)
    onyx.InferenceSession(path, so)
    assert not _entries(cache)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
def test_a_folder_others_may_write_in_is_not_used(tmp_path, cache, optimizer_calls):
    path = _copy(tmp_path)
    onyx.InferenceSession(path)
    assert len(_entries(cache)) == 1
    cache.chmod(0o777)  # (anyone could plant an entry: it is not trusted)
    onyx.InferenceSession(path)
    assert len(optimizer_calls) == 2
    cache.chmod(0o700)
    onyx.InferenceSession(path)
    assert len(optimizer_calls) == 2
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    so = onyx.SessionOptions()
    so.add_session_config_entry(model_cache.CONFIG_KEY, str(shared))
    onyx.InferenceSession(path, so)
    assert not _entries(shared)


def test_the_session_looks_for_the_cache_under_the_caches_own_names():
    # (a session that names no folder never imports model_cache.py: it reads the two
    # switches itself)
    assert (session._CACHE_CONFIG_KEY, session._CACHE_ENV) == (  # noqa: SLF001
        model_cache.CONFIG_KEY,
        model_cache.ENV,
    )
