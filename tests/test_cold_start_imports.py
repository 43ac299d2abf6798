"""What a fresh process imports to run a float model (issue 23's cold start): not ml_dtypes,
not protobuf's pure-Python builder; and the types imported late still map both ways."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import onyx

TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_float_session_imports_neither_ml_dtypes_nor_protobufs_builder():
    # (nor json, a writer of models, the transformer fusions for its Softmax, the extension
    # module of big files, OrtValues, IOBinding or the profiler; binascii comes with
    # protobuf's well-known types, which upb's first class imports)
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "i = s.get_inputs()[0]\n"
        "x = np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)\n"
        "s.run(None, {i.name: x}); s.run(None, {i.name: x})\n"
        "print(sorted(m for m in ('ml_dtypes', 'google.protobuf.descriptor_pool',\n"
        "    'onyx.optimizer.qdq', 'onyx.optimizer.trees', 'gzip', 'json',\n"
        "    'onyx.optimizer.transformer', 'onyx.serde.writer', 'mmap',\n"
        "    'onyx.runtime.ortvalue', 'onyx.runtime.iobinding', 'onyx.runtime.profiler')\n"
        "    if m in sys.modules))\n"
    )
    assert _fresh(code) == "[]"


def test_ml_dtypes_types_map_both_ways_when_imported_after_onyx():
    code = (
        "import numpy as np, onyx\n"
        "from onyx.ir.dtypes import DataType, from_numpy, to_numpy, BY_ENUM\n"
        "from onyx.runtime.kernels.elementwise import is_float, upcast\n"
        "import ml_dtypes\n"  # (the user's import: onyx has not asked for the types yet)
        "bf = np.dtype(ml_dtypes.bfloat16)\n"
        "assert from_numpy(bf) == DataType.BFLOAT16\n"
        "assert from_numpy(ml_dtypes.int4) == DataType.INT4\n"
        "assert to_numpy(DataType.FLOAT8E4M3FN) == np.dtype(ml_dtypes.float8_e4m3fn)\n"
        "assert is_float(bf) and upcast(np.ones(2, bf)).dtype == np.float32\n"
        "assert repr(BY_ENUM[DataType.BFLOAT16]).startswith('DTypeInfo(')\n"
        "print('ok')\n"
    )
    assert _fresh(code) == "ok"


def test_an_exotic_type_in_a_model_loads_ml_dtypes_on_its_own():
    code = (
        "import sys, numpy as np, onyx\n"
        "from onyx.ir.dtypes import DataType, to_numpy\n"
        "from onyx.runtime.kernels.elementwise import is_float\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "bf = to_numpy(DataType.BFLOAT16)\n"
        "assert 'ml_dtypes' in sys.modules and is_float(bf) and bf.name == 'bfloat16'\n"
        "print('ok')\n"
    )
    assert _fresh(code) == "ok"


def test_a_float_cnn_imports_only_the_native_families_it_runs():
    # the library's families are imported (and bound) when a kernel first asks for one (the
    # layout pass asks for the channels-last family only where it finds a chain to run)
    code = (
        "import sys, numpy as np, onyx\n"
        "from onyx.runtime import native\n"
        "before = sorted(m for m in sys.modules if m.startswith('onyx.runtime.native.'))\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "i = s.get_inputs()[0]\n"
        "x = np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)\n"
        "s.run(None, {i.name: x})\n"
        "print(before, sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "    if m.startswith('onyx.runtime.native.') and m.rsplit('.', 1)[1] in\n"
        "    ('gemm_i8', 'trees', 'attention', 'nbits', 'rnn', 'convtranspose', 'resize',\n"
        "     'nhwc', 'conv_f32', 'depthwise', 'gemv', 'winograd', 'norms')),\n"
        "    not native.available() or 'onyx.runtime.native.rows' in sys.modules,\n"
        "    [m for m, v in sys.modules.items() if m.startswith('onyx.runtime.native.')\n"
        "     and hasattr(v, 'layer_norm_f32')])\n"
    )
    # (its convs run on small_cnn, its Gemm on numpy: the implicit GEMM's family is asked for
    # after theirs; the GEMV's, the small conv's and Winograd's limits live in _core: its 3x3
    # convs of 3 and 8 channels are too small for Winograd, asked first; its global average
    # pooling and softmax run on rows, without the normalizations, norms: no module of the
    # layer norm's is loaded)
    assert _fresh(code) == "['onyx.runtime.native._core'] [] True []"


def test_a_family_imported_late_is_bound_to_the_library():
    code = (
        "import sys\n"
        "from onyx.runtime import native\n"
        "assert 'onyx.runtime.native.trees' not in sys.modules\n"
        "from onyx.runtime.native.trees import forest_sums\n"  # (a plain submodule import)
        "lib = native.library()\n"
        "print(lib is None or lib.onyx_svm_coupling.argtypes is not None, native.status())\n"
    )
    bound, status = _fresh(code).split(" ", 1)
    assert bound == "True" and (" off: " not in status or status.startswith("off: ONYX_NATIVE"))


def test_channels_last_and_product_kernels_import_only_what_they_run():
    # the activation codes and parameters live in native/_core, the products' threads trait
    # asks native.avx512(): neither imports a family; channels_last's numpy fallback alone
    # needs fused.py (and conv.py: the conv geometry is conv_geometry.py's), linalg only
    # low_floats.py of the elementwise kernels
    code = (
        "import sys\n"
        "import onyx\n"
        "from onnx import TensorProto, helper, numpy_helper\n"
        "import numpy as np\n"
        "from onyx.runtime import native\n"
        "from onyx.runtime.kernels import channels_last, linalg  # noqa: F401\n"
        "assert native.CONV_ACTIVATIONS['Relu'] == 1\n"
        "assert native.activation_params('Clip', None) == (-np.inf, np.inf)\n"
        "b = numpy_helper.from_array(np.ones((4, 3), np.float32), 'b')\n"
        "g = helper.make_graph([helper.make_node('Gemm', ['a', 'b'], ['y'])], 'g',\n"
        "    [helper.make_tensor_value_info('a', TensorProto.FLOAT, [2, 4])],\n"
        "    [helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3])], [b])\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])\n"
        "onyx.InferenceSession(m.SerializeToString())\n"
        "print(sorted(m for m in ('onyx.runtime.native.conv_f32', 'onyx.runtime.native.gemm_f32',\n"
        "    'onyx.runtime.kernels.fused', 'onyx.runtime.kernels.activation',\n"
        "    'onyx.runtime.kernels.elementwise', 'onyx.runtime.kernels.conv') if m in sys.modules))\n"
    )
    assert _fresh(code) == "[]"


def test_the_cheap_avx512_answer_agrees_with_the_gemm_familys():
    from onyx.runtime import native

    assert native.avx512() == native.sgemm_ok()


def test_well_known_types_made_after_onyx_have_their_mixins():
    code = (
        "import onyx\n"
        f"onyx.load({str(TINY)!r})\n"
        "from google.protobuf import any_pb2, struct_pb2, timestamp_pb2\n"
        "from google.protobuf.internal import well_known_types as wkt\n"
        "t = timestamp_pb2.Timestamp()\n"
        "t.FromSeconds(12)\n"
        "s = struct_pb2.Struct()\n"
        "s['a'] = 1.5\n"
        "a = any_pb2.Any()\n"
        "a.Pack(t)\n"
        "assert isinstance(t, wkt.Timestamp) and isinstance(a, wkt.Any), type(t).__mro__\n"
        "print(t.ToJsonString(), s['a'], a.Is(timestamp_pb2.Timestamp.DESCRIPTOR))\n"
    )
    assert _fresh(code) == "1970-01-01T00:00:12Z 1.5 True"


def test_onyx_after_protobufs_python_side_is_loaded_as_ever():
    code = (
        "from google.protobuf import timestamp_pb2\n"
        "import onyx\n"
        f"m = onyx.load({str(TINY)!r})\n"
        "import onnx\n"
        f"onnx.checker.check_model(onnx.load({str(TINY)!r}))\n"
        "print(len(m.graph.nodes) > 0, timestamp_pb2.Timestamp().ToJsonString())\n"
    )
    assert _fresh(code) == "True 1970-01-01T00:00:00Z"


def test_the_runtime_is_imported_without_collector_passes_and_leaves_it_as_it_was():
    code = (
        "import gc, numpy as np\n"
        "passes = []\n"
        "gc.callbacks.append(lambda what, info: passes.append(what) if what == 'stop' else None)\n"
        "import onyx\n"
        "onyx.SessionOptions\n"
        "print(len(passes), gc.isenabled(), end=' ')\n"
        "gc.disable()\n"
        "onyx.optimize\n"  # (a user's choice stands)
        "print(gc.isenabled())\n"
    )
    assert _fresh(code) == "0 True False"


def test_well_known_types_imported_first_after_onyx():
    # (well_known_types imports google.protobuf.descriptor half-way through its own import)
    code = (
        "import onyx\n"
        f"onyx.load({str(TINY)!r})\n"
        "from google.protobuf.internal import well_known_types as wkt\n"
        "from google.protobuf import timestamp_pb2\n"
        "t = timestamp_pb2.Timestamp()\n"
        "t.FromSeconds(12)\n"
        "print(isinstance(t, wkt.Timestamp), t.ToJsonString())\n"
    )
    assert _fresh(code) == "True 1970-01-01T00:00:12Z"


def test_an_import_hook_installed_before_onyx_still_finds_protobufs_descriptor():
    code = (
        "import importlib.machinery, sys\n"
        "seen = []\n"
        "class Hook:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        seen.append(name)\n"
        "        return importlib.machinery.PathFinder.find_spec(name, path)\n"
        "sys.meta_path.insert(0, Hook())\n"
        "import onyx\n"
        f"onyx.load({str(TINY)!r})\n"
        "from google.protobuf import timestamp_pb2\n"
        "t = timestamp_pb2.Timestamp()\n"
        "t.FromSeconds(12)\n"
        "print('google.protobuf.descriptor' in seen, t.ToJsonString())\n"
    )
    assert _fresh(code) == "True 1970-01-01T00:00:12Z"


def test_protobufs_descriptor_imported_while_onyxs_classes_are_made():
    # (as another thread might: onyx's finder comes too late to see it imported)
    code = (
        "import sys\n"
        "def profile(frame, event, arg):\n"
        "    if event == 'call' and frame.f_code.co_name == 'build':\n"
        "        sys.setprofile(None)\n"
        "        import google.protobuf.descriptor\n"
        "sys.setprofile(profile)\n"
        "import onyx.proto\n"
        "sys.setprofile(None)\n"
        "from google.protobuf import timestamp_pb2\n"
        "t = timestamp_pb2.Timestamp()\n"
        "t.FromSeconds(12)\n"
        "print(t.ToJsonString())\n"
    )
    assert _fresh(code) == "1970-01-01T00:00:12Z"


def test_the_collector_is_on_after_threads_import_onyxs_names_at_once():
    code = (
        "import gc, threading, onyx\n"
        "names = ['InferenceSession', 'optimize', 'load', 'to_text', 'compare', 'ir']\n"
        "start = threading.Barrier(len(names))\n"
        "def get(name):\n"
        "    start.wait()\n"
        "    getattr(onyx, name)\n"
        "threads = [threading.Thread(target=get, args=(n,)) for n in names]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(gc.isenabled(), all(n in vars(onyx) for n in names))\n"
    )
    assert _fresh(code) == "True True"


def test_a_float_sessions_first_run_imports_no_writer_cache_or_runner_generation():
    # (serde's .pb tensor files and string setters serve saving and test data; the model
    # cache only a session that names a folder; the generated runner a second run: the
    # first, checked run never makes one; the split-weight helpers integer convs only; the
    # elementwise kernels a model with one, or a Gelu: not tiny_cnn's Relu and Softmax)
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "i = s.get_inputs()[0]\n"
        "x = np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)\n"
        "s.run(None, {i.name: x})\n"
        "print(sorted(m for m in ('onyx.serde.text', 'onyx.serde.values',\n"
        "    'onyx.runtime.model_cache', 'onyx.runtime.conv_chain',\n"
        "    'onyx.runtime.kernels.integer_conv', 'onyx.runtime.kernels.elementwise')\n"
        "    if m in sys.modules))\n"
        "s.run(None, {i.name: x})\n"
        "print([m for m, v in list(sys.modules.items()) if m == 'onyx.runtime.conv_chain'\n"
        "    or m.startswith('onyx.') and any(k.endswith('ShapeMemo') for k in vars(v))])\n"
        "print(onyx.to_array(onyx.from_array(np.ones(2, np.float32))).tolist())\n"
    )
    # (the second run generates the runner, without conv_chain: no Nhwc steps to chain; nor
    # the shape memo's class (shape_memo.py): no Shape or Size step)
    assert _fresh(code).splitlines() == ["[]", "[]", "[1.0, 1.0]"]


def test_a_channels_last_cnns_session_imports_no_kernel_of_its_ops_bodies(tmp_path):
    # (its ai.onyx ops are model-local functions whose bodies hold FusedConv, Transpose,
    # ReduceMean: their own kernels run, the bodies never do; the creation's question of
    # where the work runs was answered by the first conv, and walking on into the bodies
    # imported fused.py, activation.py, reduction.py and elementwise.py)
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    n = helper.make_node
    inits = {
        "w1": rng.standard_normal((8, 3, 3, 3)), "b1": rng.standard_normal(8),
        "w2": rng.standard_normal((8, 1, 3, 3)), "b2": rng.standard_normal(8),
        "lo": np.float32(0), "hi": np.float32(6), "wc": rng.standard_normal((5, 8)),
    }  # fmt: skip
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        n("Clip", ["a", "lo", "hi"], ["a1"]),
        n("Conv", ["a1", "w2", "b2"], ["d"], group=8, pads=[1, 1, 1, 1]),
        n("Clip", ["d", "lo", "hi"], ["d1"]),
        n("GlobalAveragePool", ["d1"], ["g"]),
        n("Flatten", ["g"], ["f"]),
        n("Gemm", ["f", "wc"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(np.asarray(a, np.float32), k) for k, a in inits.items()],
    )  # fmt: skip
    path = tmp_path / "cnn.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                     .SerializeToString())  # fmt: skip
    code = (
        "import sys, onyx\n"
        "from onyx.optimizer import layout\n"
        "layout._worthwhile = lambda: True\n"  # (the pass fires without AVX-512 too)
        f"s = onyx.InferenceSession({str(path)!r})\n"
        "print(sorted(set(n.op_type for n in s.plan.graph)), sorted(m.rsplit('.', 1)[1]\n"
        "    for m in ('onyx.runtime.kernels.fused', 'onyx.runtime.kernels.activation',\n"
        "    'onyx.runtime.kernels.reduction', 'onyx.runtime.kernels.elementwise')\n"
        "    if m in sys.modules))\n"
    )
    assert _fresh(code) == (
        "['Flatten', 'Gemm', 'NhwcFusedConv', 'NhwcGlobalAveragePool', 'Transpose'] []"
    )


def test_the_lazy_imports_leave_their_objects_out_of_the_collectors_young_generations():
    # the objects an import of onyx's makes live as long as the process: the collector's
    # first pass after the import's pause would scan them all (a millisecond and more of a
    # cold start) to find nothing; they go straight to its oldest generation instead
    code = (
        "import gc, numpy\n"
        "gc.collect()\n"
        "import onyx\n"
        "onyx.InferenceSession\n"
        "[object() for _ in range(10)]; x = [[] for _ in range(2000)]\n"
        "from onyx.runtime import session\n"
        "f = session.InferenceSession.run\n"
        "print([any(o is f for o in gc.get_objects(g)) for g in range(3)], gc.isenabled())\n"
    )
    assert _fresh(code) == "[False, False, True] True"


def test_the_lazy_imports_keep_a_callers_frozen_objects_and_its_switched_off_collector():
    code = (
        "import gc, numpy\n"
        "kept = [[]]\n"
        "gc.freeze()\n"
        "import onyx\n"
        "onyx.InferenceSession\n"
        "gc.disable()\n"
        "onyx.check\n"
        "print(any(o is kept for o in gc.get_objects()), gc.isenabled())\n"  # (still frozen)
    )
    assert _fresh(code) == "False False"


def test_a_creations_checker_optimizer_and_inference_are_settled_before_the_model_is_read():
    code = (
        "import gc, numpy, onyx\n"
        "onyx.InferenceSession\n"
        "gc.collect()\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "x = [[] for _ in range(2000)]\n"
        "from onyx import checker, inference, optimizer\n"
        "fs = [checker.check, optimizer.optimize, inference.infer_shapes]\n"
        "print([[any(o is f for o in gc.get_objects(g)) for g in range(3)] for f in fs])\n"
    )
    assert _fresh(code) == str([[False, False, True]] * 3)


def _cast_models(tmp_path) -> tuple[str, str]:
    """A model with a Cast, a QDQ pair and a Gather (float types only), and one casting to
    float8 (saturating) and int4 and back: onnx's helpers import ml_dtypes, so they are
    made here and read by the fresh process from files."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    def save(name, nodes, inputs, outputs, inits=(), opset=21):
        g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(m.SerializeToString())
        return str(path)

    x = helper.make_tensor_value_info("x", T.FLOAT, [4])
    ids = helper.make_tensor_value_info("ids", T.INT64, [2])
    plain = save(
        "plain",
        [
            helper.make_node("Cast", ["x"], ["i"], to=T.INT64),
            helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["d"]),
            helper.make_node("Gather", ["table", "ids"], ["g"]),
        ],
        [x, ids],
        [
            helper.make_tensor_value_info("i", T.INT64, [4]),
            helper.make_tensor_value_info("d", T.FLOAT, [4]),
            helper.make_tensor_value_info("g", T.FLOAT, [2, 3]),
        ],
        [
            numpy_helper.from_array(np.array(0.5, np.float32), "s"),
            numpy_helper.from_array(np.array(3, np.int8), "zp"),
            numpy_helper.from_array(np.arange(15, dtype=np.float32).reshape(5, 3), "table"),
        ],
    )
    low = save(
        "low",
        [
            helper.make_node("Cast", ["x"], ["f8"], to=T.FLOAT8E4M3FN, saturate=1),
            helper.make_node("Cast", ["f8"], ["y"], to=T.FLOAT),
            helper.make_node("Cast", ["x"], ["i4"], to=T.INT4),
            helper.make_node("Cast", ["i4"], ["z"], to=T.INT64),
        ],
        [x],
        [
            helper.make_tensor_value_info("y", T.FLOAT, [4]),
            helper.make_tensor_value_info("z", T.INT64, [4]),
        ],
    )
    return plain, low


def test_cast_quantize_and_gather_import_neither_ml_dtypes_nor_mmap_until_a_type_needs_them(
    tmp_path,
):
    # (ml_dtypes' import is milliseconds of a cold start: the Cast and quantization kernels
    # make their tables of its types once it is imported, which an ONNX type of its does)
    plain, low = _cast_models(tmp_path)
    x = [1.0, 500.0, 1e6, -7.6]
    code = (
        "import sys, numpy as np, onyx\n"
        f"x = np.array({x!r}, np.float32)\n"
        f"s = onyx.InferenceSession({plain!r})\n"
        "i, d, g = s.run(None, {'x': x, 'ids': np.array([4, -5])})\n"
        "print(i.tolist(), d.tolist(), g.tolist())\n"
        "print(sorted(m for m in ('ml_dtypes', 'mmap') if m in sys.modules))\n"
        "so = onyx.SessionOptions()\n"
        "so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL\n"
        f"y, z = onyx.InferenceSession({low!r}, so).run(None, {{'x': x}})\n"
        "print(y.tolist(), z.tolist())\n"
    )
    lines = _fresh(code).splitlines()
    assert (
        lines[0]
        == "[1, 500, 1000000, -7] [1.0, 62.0, 62.0, -7.5] [[12.0, 13.0, 14.0], [0.0, 1.0, 2.0]]"
    )
    assert lines[1] == "[]"
    # (float8e4m3fn saturates at 448; int4 wraps like the wider integers, after truncation)
    assert lines[2] == "[1.0, 448.0, 448.0, -7.5] [1, 4, 0, -7]"


def test_a_tree_ensembles_first_run_does_not_import_numpy_ma(tmp_path):
    # (numpy 2's np.unique without indices or counts imports numpy.ma at its first call:
    # milliseconds of a tree model's cold start; onyx.utils.unique asks for the counts)
    from onnx import TensorProto as T
    from onnx import helper

    tree = helper.make_node(
        "TreeEnsembleClassifier",
        ["x"],
        ["label", "probabilities"],
        domain="ai.onnx.ml",
        classlabels_int64s=[0, 1],
        nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2],
        nodes_featureids=[0, 0, 0],
        nodes_values=[0.5, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0, 0],
        class_nodeids=[1, 2],
        class_ids=[0, 1],
        class_weights=[1.0, 1.0],
    )
    g = helper.make_graph(
        [tree],
        "tree",
        [helper.make_tensor_value_info("x", T.FLOAT, [None, 1])],
        [
            helper.make_tensor_value_info("label", T.INT64, [None]),
            helper.make_tensor_value_info("probabilities", T.FLOAT, [None, 2]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    path = tmp_path / "tree.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=opsets).SerializeToString())
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({str(path)!r})\n"
        "label, p = s.run(None, {'x': np.array([[0.2], [0.9]], np.float32)})\n"
        "print(label.shape, p.shape, 'numpy.ma' in sys.modules)\n"
    )
    assert _fresh(code) == "(2,) (2, 2) False"


def test_a_resize_of_a_symbolic_dim_infers_its_formula_without_importing_fractions(tmp_path):
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")],
        "up",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", 8])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.array([1, 1, 1.5, 2], np.float32), "scales")],
    )
    path = tmp_path / "up.onnx"
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    path.write_bytes(m.SerializeToString())
    code = (
        "import sys, onyx\n"
        f"m = onyx.infer_shapes(onyx.load({str(path)!r}))\n"
        "print(m.graph.outputs[0].type.shape.dims, 'fractions' in sys.modules)\n"
    )
    assert _fresh(code) == "('N', 3, 'H + floor(H/2)', 16) False"


def test_a_fused_product_and_a_layer_norm_import_no_conv_module():
    # (fused.py's products and normalization.py's dtype rule need nothing of conv.py, which
    # brings conv1d, small_cnn, winograd and the conv geometry along)
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import onyx\n"
        "from onnx import TensorProto as T, helper, numpy_helper\n"
        "inits = [numpy_helper.from_array(np.ones((4, 4), np.float32), 'w'),\n"
        "    numpy_helper.from_array(np.ones(4, np.float32), 'b'),\n"
        "    numpy_helper.from_array(np.ones(4, np.float32), 'g')]\n"
        "g = helper.make_graph([helper.make_node('MatMul', ['x', 'w'], ['m']),\n"
        "    helper.make_node('Add', ['m', 'b'], ['a']),\n"
        "    helper.make_node('LayerNormalization', ['a', 'g', 'b'], ['y'], axis=-1)], 'g',\n"
        "    [helper.make_tensor_value_info('x', T.FLOAT, [1, 2, 4])],\n"
        "    [helper.make_tensor_value_info('y', T.FLOAT, [1, 2, 4])], inits)\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])\n"
        "s = onyx.InferenceSession(m.SerializeToString())\n"
        "y, = s.run(None, {'x': np.arange(8, dtype=np.float32).reshape(1, 2, 4)})\n"
        "ops = sorted(n.op_type for n in s.plan.graph)\n"
        "print(ops, y.shape, sorted(m.rsplit('.', 1)[1] for m in sys.modules if m in (\n"
        "    'onyx.runtime.kernels.conv', 'onyx.runtime.kernels.conv1d',\n"
        "    'onyx.runtime.kernels.winograd', 'onyx.runtime.kernels.fused',\n"
        "    'onyx.runtime.kernels.normalization')))\n"
    )
    assert (
        _fresh(code) == "['LayerNormalization', 'MatMulAdd'] (1, 2, 4) ['fused', 'normalization']"
    )


def test_dims_that_are_plain_names_compile_no_expression_parser():
    # (tiny_cnn's batch dim "N": one name, a symbol without the tokenizer's regular
    # expression, whose compilation cost a cold start ~0.2 ms; an expression still parses)
    code = (
        "import numpy as np, onyx\n"
        "from onyx.inference import symbolic\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "i = s.get_inputs()[0]\n"
        "s.run(None, {i.name: np.zeros([1, 1, 28, 28], np.float32)})\n"
        "print(i.shape[0], symbolic._token is None, symbolic.parse('2*N + 1'))\n"
    )
    assert _fresh(code) == "N True 2*N + 1"


def _while_half_imported(module: str, setup: str, call: str) -> str:
    """What ``call`` printed, made in a thread while another thread's first import of
    ``module`` is held half way (the module in sys.modules, its body not run yet)."""
    code = (
        "import importlib.machinery, sys, threading, time, numpy as np\n"
        f"{setup}\n"
        f"assert {module!r} not in sys.modules\n"
        "started, go = threading.Event(), threading.Event()\n"
        "class Slow:\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name != {module!r}:\n"
        "            return None\n"
        "        spec = importlib.machinery.PathFinder.find_spec(name, path)\n"
        "        real = spec.loader\n"
        "        class Loader:\n"
        "            def create_module(self, spec):\n"
        "                return real.create_module(spec)\n"
        "            def exec_module(self, module):\n"
        "                started.set(); go.wait(); real.exec_module(module)\n"
        "        spec.loader = Loader()\n"
        "        return spec\n"
        "sys.meta_path.insert(0, Slow())\n"
        f"importer = threading.Thread(target=lambda: __import__({module!r}))\n"
        "importer.start(); started.wait()\n"
        "got = []\n"
        "def run():\n"
        "    try:\n"
        f"        got.append({call})\n"
        "    except Exception as e:\n"
        "        got.append(e)\n"
        "caller = threading.Thread(target=run); caller.start()\n"
        "time.sleep(0.3); go.set(); importer.join(); caller.join()\n"
        "print(repr(got[0]) if isinstance(got[0], Exception) else got[0])\n"
    )
    return _fresh(code)


def test_a_cast_while_another_thread_first_imports_ml_dtypes_waits_for_its_types():
    # (cast.py makes its ml_dtypes tables once ml_dtypes is imported; a module another
    # thread is still importing is in sys.modules half made, without those types yet: a
    # float -> int Cast then raised AttributeError instead of waiting for the import)
    got = _while_half_imported(
        "ml_dtypes",
        "from onyx.runtime.kernels import cast",
        "cast.cast_numeric(np.array([1.5, -2.5], np.float32), np.dtype(np.int32)).tolist()",
    )
    assert got == "[1, -2]"


def test_a_gather_or_a_load_while_another_thread_first_imports_mmap_waits_for_it():
    # (the same for mmap: a Gather's look for a file mapping, and the loader's, read the
    # half-made module's missing mmap type)
    setup = "from onyx.runtime.kernels import mapped; from onyx import checker_fast"
    call = "(mapped.file_mapping(np.zeros(3)), checker_fast._is_mapped(b'x'))"
    assert _while_half_imported("mmap", setup, call) == "(None, False)"
