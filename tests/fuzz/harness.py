"""The fuzzing harness: seeded mutations of valid models, each run in a forked process with a
time and memory limit through load -> check -> infer_shapes -> optimize -> InferenceSession ->
run -> dumps, and classified.

Seeds are onnx's node-suite models (with their test inputs) and tests/models. A case is
(seed, mutation, rng seed): the same triple gives the same bytes. Outcomes:

* ``ok``: every stage succeeded;
* ``onyx-error``: some stage refused the input with an ``onyx.OnyxError`` (the contract);
* ``exception`` (bug): a stage raised anything else;
* ``signal`` (bug): the process died (SIGSEGV, SIGABRT...);
* ``hang`` (bug): the case ran past its time limit;
* ``memory``: a stage ran out of its memory limit (a model may legitimately ask for more
  memory than the limit; reported, not counted as a bug);
* ``endless-loop``: the run timed out in a model whose Loop has no trip count (it loops
  while its condition holds: as written it may never end, in onnxruntime too).

``scripts/fuzz.py`` runs many cases; ``tests/fuzz/test_fuzz_sample.py`` a fast seeded sample.
"""

from __future__ import annotations

import glob
import json
import os
import random
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

try:
    from . import cnn_cases
except ImportError:  # (imported as a top-level module: tests/fuzz on sys.path)
    import cnn_cases

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUGS = ("exception", "signal", "hang")
OUTCOMES = ("ok", "onyx-error", "memory", "endless-loop", *BUGS)
#: Values near the sizes where 32- and 64-bit arithmetic overflows.
OVERFLOW = [2**31 - 1, 2**31, 2**31 + 7, 2**32 - 5, 2**32, 2**62, 2**63 - 1, -(2**63), -1, 0]
WINDOW_ATTRS = ("kernel_shape", "dilations", "strides", "pads")
SWAP_OPS = ["Relu", "Add", "MatMul", "Conv", "MaxPool", "Reshape", "Gather", "Concat", "Slice",
            "Transpose", "Softmax", "LSTM", "If", "Loop", "Einsum", "Cast", "Resize", "TopK",
            "Unsqueeze", "LayerNormalization", "QLinearConv", "Split", "Expand", "Where"]  # fmt: skip


@dataclass
class Seed:
    name: str
    data: bytes
    feeds: dict = field(default_factory=dict)


@dataclass
class Result:
    case: str
    outcome: str
    stage: str = ""
    detail: str = ""


# -- seeds --------------------------------------------------------------------------------------
def node_seeds(limit: int | None = None) -> list[Seed]:
    """onnx's node-suite models with the inputs of their first data set."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    seeds = []
    for c in cases[:limit]:
        if c.model is None:
            continue
        feeds = {}
        if c.data_sets:
            inputs = c.data_sets[0][0]
            names = [i.name for i in c.model.graph.input]
            if all(isinstance(x, np.ndarray) for x in inputs):
                feeds = dict(zip(names, inputs))
        seeds.append(Seed(c.name, c.model.SerializeToString(), feeds))
    return seeds


#: The serving zoo's CNNs (benchmarks/models/serving, generated: used where present), whose
#: convs run channels-last in native chains.
SERVING_SEEDS = ("cnn_mobilenet", "cnn_unet", "cnn_mobilenet_qdq")


def model_seeds() -> list[Seed]:
    paths = sorted(glob.glob(os.path.join(ROOT, "tests", "models", "*.onnx")))
    serving = os.path.join(ROOT, "benchmarks", "models", "serving")
    paths += [p for p in (os.path.join(serving, n + ".onnx") for n in SERVING_SEEDS)
              if os.path.exists(p)]  # fmt: skip
    return [
        Seed(os.path.basename(p), open(p, "rb").read())
        for p in paths
        if "external" not in p  # its data file is not next to a mutated copy
    ]


# -- mutations ----------------------------------------------------------------------------------
def _proto(data: bytes):
    import onnx

    m = onnx.ModelProto()
    m.ParseFromString(data)
    return m


def flip_bits(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))]


def splice_bytes(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data))
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return data[:i] + junk + data[i + rng.randint(0, 8) :]


def wrong_dims(m, rng):
    values = [
        v for v in list(m.graph.input) + list(m.graph.output) if v.type.HasField("tensor_type")
    ]
    if values:
        dims = rng.choice(values).type.tensor_type.shape.dim
        if len(dims):
            rng.choice(dims).dim_value = rng.choice(OVERFLOW + [1, 3])
        else:
            rng.choice(values).type.tensor_type.shape.dim.add().dim_value = rng.choice(OVERFLOW)
    if m.graph.initializer and rng.random() < 0.5:
        t = rng.choice(m.graph.initializer)
        if len(t.dims):
            t.dims[rng.randrange(len(t.dims))] = rng.choice(OVERFLOW + [1, 3])


def wrong_dtype(m, rng):
    values = [
        v for v in list(m.graph.input) + list(m.graph.output) if v.type.HasField("tensor_type")
    ]
    if values and rng.random() < 0.6:
        rng.choice(values).type.tensor_type.elem_type = rng.randint(0, 27)
    elif m.graph.initializer:
        rng.choice(m.graph.initializer).data_type = rng.randint(0, 27)


def swap_attr_type(m, rng):
    import onnx

    attrs = [a for n in m.graph.node for a in n.attribute]
    if not attrs:
        return
    a = rng.choice(attrs)
    A = onnx.AttributeProto
    kind = rng.choice([A.INT, A.FLOAT, A.STRING, A.INTS, A.FLOATS, A.TENSOR, A.GRAPH, A.STRINGS])
    a.type = kind
    if kind == A.STRING and rng.random() < 0.5:
        a.s = b"\xff\xfe" + a.s  # not UTF-8 either


def missing_input(m, rng):
    nodes = [n for n in m.graph.node if len(n.input)]
    if nodes:
        n = rng.choice(nodes)
        if rng.random() < 0.5:
            n.input[rng.randrange(len(n.input))] = ""
        else:
            del n.input[-1]


def swap_op_type(m, rng):
    if m.graph.node:
        rng.choice(m.graph.node).op_type = rng.choice(SWAP_OPS)


def cycle(m, rng):
    nodes = m.graph.node
    if len(nodes) >= 1 and nodes[-1].output and nodes[0].input:
        nodes[0].input[0] = nodes[-1].output[0]


def recursive_functions(m, rng):
    from onnx import helper

    ops = [helper.make_opsetid("", 17), helper.make_opsetid("fz", 1)]
    f = helper.make_function(
        "fz", "F", ["a"], ["b"], [helper.make_node("G", ["a"], ["b"], domain="fz")], ops
    )
    g = helper.make_function(
        "fz", "G", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="fz")], ops
    )
    m.functions.extend([f, g])
    m.opset_import.append(helper.make_opsetid("fz", 1))
    if m.graph.input and m.graph.output:
        m.graph.node.append(helper.make_node("F", [m.graph.input[0].name], ["fz_out"], domain="fz"))
        m.graph.output[0].name = "fz_out" if rng.random() < 0.5 else m.graph.output[0].name


def absurd_sparse(m, rng):
    from onnx import helper, numpy_helper

    n = rng.randint(1, 3)
    idx = np.array([rng.choice(OVERFLOW + [5, 1]) for _ in range(n)], np.int64)
    vals = numpy_helper.from_array(np.ones(n, np.float32), "fz_sparse")
    dims = [rng.choice([4, 0, -1, 2**40])]
    sp = helper.make_sparse_tensor(vals, numpy_helper.from_array(idx, "fz_idx"), dims)
    m.graph.sparse_initializer.append(sp)
    if m.graph.node:
        m.graph.node[0].input.append("fz_sparse")


def overflow_window(m, rng):
    from onnx import helper

    for n in m.graph.node:
        if n.op_type in ("Conv", "MaxPool", "AveragePool", "LpPool", "ConvTranspose", "ConvInteger",
                         "QLinearConv", "MaxUnpool", "Col2Im", "DeformConv"):  # fmt: skip
            name = rng.choice(WINDOW_ATTRS)
            rank = 2
            for a in n.attribute:
                if a.name in WINDOW_ATTRS and a.ints:
                    rank = len(a.ints) // (2 if a.name == "pads" else 1)
            count = rank * (2 if name == "pads" else 1)
            value = [rng.choice(OVERFLOW) for _ in range(count)]
            keep = [a for a in n.attribute if a.name != name]
            del n.attribute[:]
            n.attribute.extend(keep + [helper.make_attribute(name, value)])
            return
    # no window op: an attribute of any node gets an extreme value
    ints = [a for n in m.graph.node for a in n.attribute if a.type in (2, 7)]
    if ints:
        a = rng.choice(ints)
        if a.type == 2:
            a.i = rng.choice(OVERFLOW)
        elif len(a.ints):
            a.ints[rng.randrange(len(a.ints))] = rng.choice(OVERFLOW)


def external_trick(m, rng):
    from onnx import TensorProto

    if not m.graph.initializer:  # (the node suite's models have none): one nobody reads
        m.graph.initializer.add(name="fz_ext", data_type=TensorProto.FLOAT, dims=[4])
    t = rng.choice(m.graph.initializer)
    t.ClearField("raw_data")
    for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        t.ClearField(f)
    t.data_location = TensorProto.EXTERNAL
    location = rng.choice(["../../etc/passwd", "/etc/passwd", "missing.bin", "data.bin",
                           "sub/../../x.bin", "link.bin", ""])  # fmt: skip
    entries = {"location": location}
    if rng.random() < 0.5:
        entries["offset"] = str(rng.choice([0, -1, 2**63 - 1, 3]))
    if rng.random() < 0.5:
        entries["length"] = str(rng.choice([0, -5, 2**40, 16]))
    del t.external_data[:]
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v


def duplicate_input(m, rng):
    if m.graph.input:
        m.graph.input.append(m.graph.input[0])


def no_graph(m, rng):
    m.ClearField("graph")


PROTO_MUTATIONS = {
    "wrong_dims": wrong_dims,
    "wrong_dtype": wrong_dtype,
    "swap_attr_type": swap_attr_type,
    "missing_input": missing_input,
    "swap_op_type": swap_op_type,
    "cycle": cycle,
    "recursive_functions": recursive_functions,
    "absurd_sparse": absurd_sparse,
    "overflow_window": overflow_window,
    "external_trick": external_trick,
    "duplicate_input": duplicate_input,
    "no_graph": no_graph,
}


def reshape_input(m, rng):
    """A conv model's 4-D inputs declared (N, C, H, W) with symbolic N, H, W, fed a batch of 0
    to 3 and a side from 1 to 160; returns the feeds."""
    from onnx import TensorProto

    feeds = {}
    batch, side = rng.choice([0, 1, 1, 2, 3]), rng.choice([1, 2, 7, 33, 97, 160])
    inits = {t.name for t in m.graph.initializer}
    for v in m.graph.input:
        dims = v.type.tensor_type.shape.dim
        if v.name in inits or len(dims) != 4 or v.type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        for d, name in zip(dims, ("N", None, "H", "W")):
            if name is not None:
                d.dim_param = name
        c = dims[1].dim_value or 3
        feeds[v.name] = np.random.default_rng(rng.randrange(2**32)).standard_normal(
            (batch, c, side, side), np.float32
        )
    return [feeds] if feeds else None


PROTO_MUTATIONS = {
    **PROTO_MUTATIONS,
    "reshape_input": reshape_input,
}
BYTE_MUTATIONS = {"flip_bits": flip_bits, "truncate": truncate, "splice_bytes": splice_bytes}
FEED_MUTATIONS = ("bad_feed",)
#: Cases made from scratch (tests/fuzz/cnn_cases.py): the seed model is not read.
GEN_MUTATIONS = cnn_cases.GENERATORS
NATIVE_MUTATIONS = ("native_calls",)
MUTATIONS = [*BYTE_MUTATIONS, *PROTO_MUTATIONS, *FEED_MUTATIONS, "fork"]
#: The newer paths' cases drawn twice as often (their code is the youngest).
MUTATIONS += [*GEN_MUTATIONS, *GEN_MUTATIONS, *NATIVE_MUTATIONS, *NATIVE_MUTATIONS]
MUTATIONS += ["reshape_input"]  # (in PROTO_MUTATIONS already)


def mutate(seed: Seed, mutation: str, rng: random.Random) -> bytes:
    """The case's model bytes."""
    return mutate_with_feeds(seed, mutation, rng)[0]


def mutate_with_feeds(seed: Seed, mutation: str, rng: random.Random) -> tuple[bytes, list | None]:
    """The case's model bytes and, where the mutation makes them, its feeds (a list: run in
    turn, then the first again)."""
    if mutation in BYTE_MUTATIONS:
        return (BYTE_MUTATIONS[mutation](seed.data, rng) if seed.data else seed.data), None
    if mutation in PROTO_MUTATIONS:
        m = _proto(seed.data)
        feeds = PROTO_MUTATIONS[mutation](m, rng)
        return m.SerializeToString(), feeds
    if mutation in GEN_MUTATIONS:
        m, feeds = GEN_MUTATIONS[mutation](rng)
        return m.SerializeToString(), feeds
    return seed.data, None


# -- running one case ---------------------------------------------------------------------------
def random_feeds(sess, rng: random.Random) -> dict:
    from onyx.ir.dtypes import BY_ENUM  # noqa: F401  (only to fail loudly if it moves)

    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and 0 <= d < 64 else 2 for d in (i.shape or [])]
        t = i.type
        if "float" in t and "(float)" in t:
            feeds[i.name] = (
                np.random.default_rng(rng.randrange(2**32))
                .standard_normal(shape)
                .astype(np.float32)
            )
        elif "int64" in t:
            feeds[i.name] = np.ones(shape, np.int64)
        elif "bool" in t:
            feeds[i.name] = np.ones(shape, bool)
        elif "string" in t:
            feeds[i.name] = np.array(["a"] * int(np.prod(shape)), object).reshape(shape)
        elif "tensor(" in t:
            from onyx.ir.dtypes import DataType, to_numpy

            name = t[7:-1].upper()
            try:
                dtype = to_numpy(DataType[name])
                feeds[i.name] = np.zeros(shape, dtype)
            except Exception:  # noqa: BLE001
                feeds[i.name] = np.zeros(shape, np.float32)
        else:
            feeds[i.name] = []
    return feeds


def bad_feeds(feeds: dict, rng: random.Random) -> dict:
    if not feeds:
        return {"no_such_input": np.zeros(1)}
    name = rng.choice(sorted(feeds))
    out = dict(feeds)
    choice = rng.randrange(5)
    if choice == 0:
        out[name] = [[1, 2], [3]]  # ragged
    elif choice == 1:
        out[name] = np.zeros((3, 5, 7), np.complex64)
    elif choice == 2:
        del out[name]
    elif choice == 3:
        out[name] = "not an array"
    else:
        out[name] = np.zeros((0,) * max(1, np.ndim(feeds[name])), np.asarray(feeds[name]).dtype)
    return out


def stages(data: bytes, seed: Seed, mutation: str, rng: random.Random, workdir: str,
           made_feeds: list | None = None):  # fmt: skip
    """The pipeline, one (name, function) per stage; functions return nothing."""
    import onyx

    if mutation in NATIVE_MUTATIONS:
        return [("native", lambda: cnn_cases.native_calls(rng))]
    path = os.path.join(workdir, "model.onnx")
    with open(path, "wb") as f:
        f.write(data)
    with open(os.path.join(workdir, "data.bin"), "wb") as f:
        f.write(b"\0" * 64)
    os.symlink("/etc/passwd", os.path.join(workdir, "link.bin"))  # an escape by symlink
    state: dict = {}

    def run():
        sess = state.get("sess")
        if sess is None:
            return
        if made_feeds:  # (runs again and against unchained and unoptimized sessions)
            return cnn_cases.check_runs(path, made_feeds)
        feeds = dict(seed.feeds) if mutation not in PROTO_MUTATIONS else {}
        names = {i.name for i in sess.get_inputs()}
        if set(feeds) != names:
            feeds = random_feeds(sess, rng)
        if mutation == "bad_feed":
            feeds = bad_feeds(feeds, rng)
        sess.run(None, feeds)
        if mutation == "fork":
            _run_in_fork(sess, feeds)

    return [
        ("wire", lambda: wire_agrees(data)),
        ("load", lambda: _no_escape(onyx.load(path), workdir)),
        ("check", lambda: onyx.check(onyx.load(path, load_external_data=False), full=True)),
        ("infer_shapes", lambda: onyx.infer_shapes(onyx.load(path))),
        ("optimize", lambda: onyx.optimize(onyx.load(path))),
        ("session", lambda: state.__setitem__("sess", onyx.InferenceSession(path))),
        ("run", run),
        ("dumps", lambda: onyx.dumps(onyx.load(path))),
    ]


def wire_agrees(data: bytes) -> None:
    """The wire path (serde/wire_reader.py) on the case's bytes: it declines, or builds the IR
    the protobuf path builds. The stages below load through protobuf, which this harness's
    process has imported (onnx did), so this is where the fuzz reaches the wire path."""
    from onyx import OnyxError
    from onyx.serde import dumps, wire_reader
    from onyx.serde.proto_load import load_model

    model = wire_reader.read_model(data)
    if model is None:
        return
    try:
        theirs = load_model(data, "<bytes>", None, False)
    except OnyxError as e:
        raise AssertionError(f"the wire path read what protobuf refuses: {e}") from None
    if dumps(model) != dumps(theirs):
        raise AssertionError("the wire path read the bytes otherwise than protobuf")


def _no_escape(model, workdir: str) -> None:
    """A model that loaded must not read external data from outside its folder (a security
    violation, reported as a bug)."""
    base = os.path.realpath(workdir)
    for v in model.graph.initializers.values() if model.graph is not None else ():
        ext = v.const_value.external if v.const_value is not None else None
        if ext is None or not ext.location:
            continue
        where = os.path.realpath(os.path.join(base, ext.location))
        if not where.startswith(base + os.sep):
            raise AssertionError(
                f"external data {ext.location!r} outside the model's folder loaded"
            )


def _run_in_fork(sess, feeds) -> None:
    """A session made before fork() runs in the child and gives the parent's results."""
    expected = sess.run(None, feeds)
    if not all(same_values(a, b) for a, b in zip(expected, sess.run(None, feeds))):
        return  # random ops (Bernoulli, RandomNormal...): no two runs agree
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            got = sess.run(None, feeds)
            same = all(same_values(a, b) for a, b in zip(expected, got))
            os.write(w, b"1" if same else b"0")
        except BaseException as e:  # noqa: BLE001
            os.write(w, f"E{type(e).__name__}: {e}"[:200].encode())
        finally:
            os._exit(0)
    os.close(w)
    answer = os.read(r, 256)
    os.close(r)
    os.waitpid(pid, 0)
    if answer != b"1":
        raise AssertionError(f"a forked child's results differ from its parent's ({answer!r})")


def same_values(a, b) -> bool:
    """(A sequence output is a list of arrays of any shapes: compared one by one.)"""
    return cnn_cases.same_value(a, b)


def run_stages(data: bytes, seed: Seed, mutation: str, case_seed: int, progress=None,
               feeds: list | None = None) -> dict:  # fmt: skip
    """In the case's process: every stage, the worst outcome and where."""
    import onyx

    rng = random.Random(case_seed)
    worst = {"outcome": "ok", "stage": "", "detail": ""}
    rank = {o: i for i, o in enumerate(OUTCOMES)}
    with tempfile.TemporaryDirectory() as workdir, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fn in stages(data, seed, mutation, rng, workdir, feeds):
            if progress is not None:
                progress(name)
            try:
                with np.errstate(all="ignore"):
                    fn()
                continue
            except onyx.OnyxError as e:
                outcome, detail = "onyx-error", f"{type(e).__name__}: {str(e)[:200]}"
            except MemoryError as e:
                outcome, detail = "memory", f"MemoryError: {e}"
            except BaseException as e:  # noqa: BLE001  (the harness classifies everything)
                tb = traceback.extract_tb(e.__traceback__)
                where = next((f"{fr.filename.split('onyx/')[-1]}:{fr.lineno}"
                              for fr in reversed(tb) if "/onyx/" in fr.filename), "?")  # fmt: skip
                outcome, detail = "exception", f"{type(e).__name__}: {str(e)[:160]} @ {where}"
            if rank[outcome] > rank[worst["outcome"]]:
                worst = {"outcome": outcome, "stage": name, "detail": detail}
    return worst


def run_case(seed: Seed, mutation: str, case_seed: int, timeout: float = 20.0,
             memory_mb: int = 3072) -> Result:  # fmt: skip
    """One case in a forked child with ``timeout`` seconds and ``memory_mb`` of address space."""
    name = f"{seed.name}/{mutation}/{case_seed}"
    data, feeds = mutate_with_feeds(seed, mutation, random.Random(case_seed))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the case
        os.close(r)
        code = 0
        try:
            os.setpgid(0, 0)
            limit = memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            out = run_stages(
                data, seed, mutation, case_seed, lambda st: os.write(w, f"@{st}\n".encode()), feeds
            )
            os.write(w, json.dumps(out).encode())
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + timeout
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            _kill(pid)
            os.close(r)
            stage = _last_stage(chunks)
            if stage == "run" and _loops_while(data):
                return Result(name, "endless-loop", stage, f"over {timeout:.0f} s")
            return Result(name, "hang", stage, f"over {timeout:.0f} s")
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return Result(name, "signal", _last_stage(chunks), sig)
    try:
        out = json.loads(b"".join(chunks).rsplit(b"\n", 1)[-1])
    except ValueError:
        return Result(name, "exception", detail=f"the case exited with status {status}")
    return Result(name, out["outcome"], out["stage"], out["detail"])


def _last_stage(chunks: list[bytes]) -> str:
    lines = [x for x in b"".join(chunks).split(b"\n") if x.startswith(b"@")]
    return lines[-1][1:].decode() if lines else ""


def _loops_while(data: bytes) -> bool:
    """Whether the model has a Loop without a trip count (anywhere)."""
    try:
        m = _proto(data)
    except Exception:  # noqa: BLE001
        return False

    def walk(graph) -> bool:
        for n in graph.node:
            if n.op_type == "Loop" and (not n.input or not n.input[0]):
                return True
            if any(walk(a.g) for a in n.attribute if a.HasField("g")):
                return True
        return False

    return walk(m.graph) or any(walk(f) for f in m.functions)


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os.waitpid(pid, 0)


def warm_up(seeds: list[Seed]) -> None:
    """Import what the stages use once, in the parent, so each forked case starts warm."""
    import onyx
    import onyx.checker
    import onyx.inference
    import onyx.optimizer
    import onyx.runtime.session  # noqa: F401

    for s in seeds[:3]:
        try:
            onyx.InferenceSession(s.data)
        except onyx.OnyxError:
            pass


def plan(seeds: list[Seed], count: int, seed: int = 0,
         mutations: list[str] | None = None) -> list[tuple[Seed, str, int]]:  # fmt: skip
    """``count`` cases drawn with a seeded generator: (seed model, mutation, case seed), the
    mutations from ``mutations`` (default: all, the newer paths' twice as often)."""
    rng, pool = random.Random(seed), mutations or MUTATIONS
    return [(rng.choice(seeds), rng.choice(pool), rng.randrange(2**31)) for _ in range(count)]


def summarize(results: list[Result]) -> dict:
    counts = {o: 0 for o in OUTCOMES}
    for res in results:
        counts[res.outcome] += 1
    return counts


if __name__ == "__main__":  # python tests/fuzz/harness.py: a quick look
    seeds = node_seeds(200)
    warm_up(seeds)
    for s, mut, cs in plan(seeds, int(sys.argv[1]) if len(sys.argv) > 1 else 20):
        res = run_case(s, mut, cs)
        print(res)
