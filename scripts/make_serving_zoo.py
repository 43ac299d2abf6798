"""Build the serving zoo: small and mid-size models as users serve them (issue 23).

    python scripts/make_serving_zoo.py              # everything into benchmarks/models/serving/
    python scripts/make_serving_zoo.py --no-torch   # the scikit-learn part only

Dev-time only. The PyTorch models are built in a venv of their own (.bench/torch-venv, made by
this script with `pip install torch==2.13.0 onnx onnxscript`; torch never enters the test
extra); the scikit-learn models, the fp16 and the quantized variants are made in the calling
environment (the test extra: onnx, onnxruntime, scikit-learn, skl2onnx). Weights are seeded
random (nothing is downloaded). benchmarks/models/ is gitignored.

The models (batch sizes are where users serve them):

- cnn_resnet32: a width-32 ResNet (32-64-128, basic blocks) at 3x128x128, batch 4;
- cnn_mobilenet: a MobileNet-style net (inverted residuals, depthwise 3x3) at 3x96x96, batch 2;
- cnn_unet: a two-level U-Net (16-64 channels, ConvTranspose) at 3x32x32, batch 1;
- audio_kws: an audio front-end (STFT as a strided Conv1d, magnitude, mel MatMul, log) and a
  Conv1d keyword classifier on one second at 16 kHz;
- audio_vad: a VAD-like model on a 512-sample chunk (STFT Conv1d, Conv1d encoder, an LSTM
  carrying its state in and out);
- conv1d_bytes: a byte-level file-type classifier (Embedding over 4096 bytes, strided Conv1d);
- conv1d_signal: a 1-channel long-signal classifier (5000 samples, few channels);
- transformer_d128: a 2-layer d=128 transformer encoder over 32 tokens;
- rnn_lstm7: an LSTM (hidden 64) over 7 steps and a linear head;
- fp16 (weights and activations, float32 at the edges) and quantized variants (static QDQ
  for the CNNs, dynamic for the transformer) of some;
- sklearn_*: SVC, a decision tree with ZipMap, IsolationForest, kNN, GradientBoosting, a
  mixed pipeline (column transformer, scaler, one-hot bins, logistic regression), served at
  1 row and 100 rows.

manifest.json describes each model as benchmarks/zoo.py reads it, plus the batch sizes to
serve it at ("batches") and, for the scaling tables, "scaling": true.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "models" / "serving"
TORCH_VENV = ROOT / ".bench" / "torch-venv"
TORCH_PACKAGES = ["torch==2.13.0", "onnx", "onnxscript"]

# ------------------------------------------------------------------------- the torch part


def torch_models():
    """name -> (module, example inputs, input specs, output names, dynamic batch, batches)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.proj = None
            if stride != 1 or cin != cout:
                self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))  # fmt: skip

        def forward(self, x):
            y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
            return F.relu(y + (x if self.proj is None else self.proj(x)))

    class ResNet32(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                      nn.ReLU())  # fmt: skip
            self.blocks = nn.Sequential(Basic(32, 32, 1), Basic(32, 32, 1), Basic(32, 64, 2),
                                        Basic(64, 64, 1), Basic(64, 128, 2), Basic(128, 128, 1))  # fmt: skip
            self.fc = nn.Linear(128, 10)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))

    class Inverted(nn.Module):
        def __init__(self, cin, exp, cout, stride):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), nn.ReLU6(),
                nn.Conv2d(exp, exp, 3, stride, 1, groups=exp, bias=False), nn.BatchNorm2d(exp),
                nn.ReLU6(), nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout),
            )  # fmt: skip
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    class MobileNet(nn.Module):
        def __init__(self):
            super().__init__()
            cfg = [(16, 32, 16, 1), (16, 64, 24, 2), (24, 72, 24, 1), (24, 96, 40, 2),
                   (40, 160, 40, 1), (40, 192, 64, 2), (64, 256, 64, 1)]  # fmt: skip
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                      nn.ReLU6())  # fmt: skip
            self.blocks = nn.Sequential(*(Inverted(*c) for c in cfg))
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))

    def double(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1), nn.ReLU())  # fmt: skip

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.mid = double(3, 16), double(16, 32), double(32, 64)
            self.u2, self.c2 = nn.ConvTranspose2d(64, 32, 2, 2), double(64, 32)
            self.u1, self.c1 = nn.ConvTranspose2d(32, 16, 2, 2), double(32, 16)
            self.head = nn.Conv2d(16, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(F.max_pool2d(a, 2))
            m = self.mid(F.max_pool2d(b, 2))
            y = self.c2(torch.cat([self.u2(m), b], 1))
            y = self.c1(torch.cat([self.u1(y), a], 1))
            return torch.sigmoid(self.head(y))

    class STFT(nn.Module):
        """Magnitude spectrogram as a strided Conv1d over a fixed windowed DFT basis."""

        def __init__(self, n_fft, hop):
            super().__init__()
            n = torch.arange(n_fft, dtype=torch.float32)
            k = torch.arange(n_fft // 2 + 1, dtype=torch.float32)[:, None]
            window = torch.hann_window(n_fft)
            basis = torch.cat([torch.cos(2 * torch.pi * k * n / n_fft),
                               -torch.sin(2 * torch.pi * k * n / n_fft)]) * window  # fmt: skip
            self.register_buffer("basis", basis[:, None, :])
            self.hop, self.bins = hop, n_fft // 2 + 1

        def forward(self, x):  # (N, samples) -> (N, bins, frames)
            spec = F.conv1d(x[:, None, :], self.basis, stride=self.hop)
            re, im = spec[:, : self.bins], spec[:, self.bins :]
            return torch.sqrt(re * re + im * im + 1e-9)

    class KWS(nn.Module):
        def __init__(self):
            super().__init__()
            self.stft = STFT(400, 160)
            self.mel = nn.Parameter(torch.rand(201, 40) / 20, requires_grad=False)
            self.convs = nn.Sequential(
                nn.Conv1d(40, 64, 5, 1, 2), nn.BatchNorm1d(64), nn.ReLU(),
                nn.Conv1d(64, 64, 5, 2, 2), nn.BatchNorm1d(64), nn.ReLU(),
                nn.Conv1d(64, 96, 3, 2, 1), nn.BatchNorm1d(96), nn.ReLU(),
            )  # fmt: skip
            self.fc = nn.Linear(96, 12)

        def forward(self, x):
            mel = torch.log(torch.matmul(self.stft(x).transpose(1, 2), self.mel) + 1e-6)
            return self.fc(self.convs(mel.transpose(1, 2)).mean(-1))

    class VAD(nn.Module):
        def __init__(self):
            super().__init__()
            self.stft = STFT(256, 64)
            self.enc = nn.Sequential(nn.Conv1d(129, 64, 3, 1, 1), nn.ReLU(),
                                     nn.Conv1d(64, 64, 3, 2, 1), nn.ReLU())  # fmt: skip
            self.lstm = nn.LSTM(64, 64, batch_first=True)
            self.out = nn.Linear(64, 1)

        def forward(self, x, h, c):
            z = self.enc(self.stft(x)).transpose(1, 2)
            y, (h, c) = self.lstm(z, (h, c))
            return torch.sigmoid(self.out(y[:, -1])), h, c

    class Bytes(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(256, 16)
            self.c1 = nn.Conv1d(16, 64, 16, 8)
            self.c2 = nn.Conv1d(64, 128, 8, 4)
            self.fc = nn.Linear(128, 100)

        def forward(self, x):
            y = F.relu(self.c1(self.emb(x).transpose(1, 2)))
            y = F.relu(self.c2(y))
            return F.softmax(self.fc(y.amax(-1)), -1)

    class Signal(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cin = [], 1
            for cout in (8, 16, 16, 32):
                layers += [nn.Conv1d(cin, cout, 7, 2, 3), nn.BatchNorm1d(cout), nn.ReLU(),
                           nn.MaxPool1d(2)]  # fmt: skip
                cin = cout
            self.body = nn.Sequential(*layers)
            self.fc = nn.Linear(32, 5)

        def forward(self, x):
            return self.fc(self.body(x).mean(-1))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(1000, 128)
            self.pos = nn.Parameter(torch.randn(1, 32, 128) * 0.02)
            layer = nn.TransformerEncoderLayer(128, 4, 512, 0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(128, 2)

        def forward(self, ids):
            return self.head(self.enc(self.emb(ids) + self.pos).mean(1))

    class LSTM7(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(32, 64, batch_first=True)
            self.fc = nn.Linear(64, 4)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.fc(y[:, -1])

    f32, i64 = "float32", "int64"
    return {
        "cnn_resnet32": (ResNet32(), [("x", f32, ["N", 3, 128, 128], [0, 1])], [4], True),
        "cnn_mobilenet": (MobileNet(), [("x", f32, ["N", 3, 96, 96], [0, 1])], [2], True),
        "cnn_unet": (UNet(), [("x", f32, ["N", 3, 32, 32], [0, 1])], [1], False),
        "audio_kws": (KWS(), [("audio", f32, ["N", 16000], [-1, 1])], [1], False),
        "audio_vad": (
            VAD(),
            [
                ("audio", f32, ["N", 512], [-1, 1]),
                ("h", f32, [1, "N", 64], [0, 0]),
                ("c", f32, [1, "N", 64], [0, 0]),
            ],  # fmt: skip
            [1],
            False,
        ),
        "conv1d_bytes": (Bytes(), [("bytes", i64, ["N", 4096], [0, 256])], [1], False),
        "conv1d_signal": (Signal(), [("signal", f32, ["N", 1, 5000], [-1, 1])], [1], False),
        "transformer_d128": (Transformer(), [("ids", i64, ["N", 32], [0, 1000])], [1, 8], True),
        "rnn_lstm7": (LSTM7(), [("x", f32, ["N", 7, 32], [-1, 1])], [1], False),
    }


def build_torch(out: Path) -> dict:
    import torch

    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)  # the fused layer has no ONNX export
    sys.path.insert(0, str(ROOT))
    from benchmarks.zoo import make_feeds

    manifest = {}
    for name, (module, inputs, batches, scaling) in torch_models().items():
        module.eval()
        for p in module.modules():  # random, non-trivial batch-norm statistics
            if isinstance(p, torch.nn.BatchNorm1d | torch.nn.BatchNorm2d):
                p.running_mean.uniform_(-0.1, 0.1)
                p.running_var.uniform_(0.5, 1.5)
        feeds = make_feeds(inputs, batch=2)
        args = tuple(torch.from_numpy(feeds[n]) for n, *_ in inputs)
        names = [n for n, *_ in inputs]
        dyn = {n: {i: "N" for i, d in enumerate(shape) if d == "N"} for n, _, shape, _ in inputs}
        path = out / f"{name}.onnx"
        with torch.no_grad():
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=17,
                              input_names=names, dynamic_axes=dyn)  # fmt: skip
        manifest[name] = entry(path, name.split("_")[0], "torchscript", inputs, batches, scaling)
        print(f"  {name}", flush=True)
    return manifest


def entry(path: Path, family: str, exporter: str, inputs, batches, scaling=False, **extra):
    import onnx

    model = onnx.load(str(path))
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return dict(file=path.name, family=family, exporter=exporter, opset=opset, inputs=inputs,
                ops=ops, batches=batches, scaling=scaling, **extra)  # fmt: skip


# ------------------------------------------------------------------------- variants


def fp16_variant(src: Path, dst: Path) -> None:
    """float16 weights and activations, float32 inputs and outputs (as users convert)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    # the converter appends its input Casts after their consumers (onnxruntime sorts a graph;
    # the ONNX standard asks for topological order, so the file should have it)
    ready = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    pending, ordered = list(model.graph.node), []
    while pending:
        node = next(n for n in pending if all(not i or i in ready for i in n.input))
        pending.remove(node)
        ordered.append(node)
        ready.update(node.output)
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    onnx.save(model, str(dst))


def quantized_variant(src: Path, dst: Path, inputs, static: bool) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    from benchmarks.zoo import make_feeds

    if not static:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        return

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([make_feeds(inputs, 1, seed) for seed in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip


# (source, variant, static quantization)
VARIANTS = [
    ("cnn_resnet32", "fp16", None),
    ("cnn_resnet32", "qdq", True),
    ("cnn_mobilenet", "fp16", None),
    ("cnn_mobilenet", "qdq", True),
    ("transformer_d128", "fp16", None),
    ("transformer_d128", "quant_dynamic", False),
    ("conv1d_signal", "fp16", None),
]


def build_variants(out: Path, manifest: dict) -> None:
    for src, kind, static in VARIANTS:
        if src not in manifest:
            continue
        base = manifest[src]
        name = f"{src}_{kind}"
        path = out / f"{name}.onnx"
        try:
            if kind == "fp16":
                fp16_variant(out / base["file"], path)
            else:
                with tempfile.TemporaryDirectory() as d:  # quantizers want a shape-inferred copy
                    pre = Path(d) / "pre.onnx"
                    from onnxruntime.quantization.shape_inference import quant_pre_process

                    quant_pre_process(str(out / base["file"]), str(pre), skip_symbolic_shape=True)
                    quantized_variant(pre, path, base["inputs"], static)
        except Exception as e:  # a converter's failure costs one variant, not the zoo
            print(f"  {name}: skipped ({type(e).__name__}: {e})", flush=True)
            continue
        manifest[name] = entry(path, base["family"], base["exporter"], base["inputs"],
                               base["batches"], quantization=kind)  # fmt: skip
        print(f"  {name}", flush=True)


# ------------------------------------------------------------------------- scikit-learn


def sklearn_models():
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import GradientBoostingClassifier, IsolationForest
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import KBinsDiscretizer, StandardScaler
    from sklearn.svm import SVC
    from sklearn.tree import DecisionTreeClassifier

    mixed = make_pipeline(
        ColumnTransformer([
            ("scaled", StandardScaler(), list(range(0, 12))),
            ("binned", KBinsDiscretizer(5, encode="onehot-dense", strategy="uniform"),
             list(range(12, 20))),
        ]),
        LogisticRegression(max_iter=500),
    )  # fmt: skip
    # name -> (estimator, zipmap option): ZipMap where users keep skl2onnx's default
    return {
        "sklearn_svc": (SVC(probability=True, random_state=0), False),
        "sklearn_tree_zipmap": (DecisionTreeClassifier(max_depth=12, random_state=0), True),
        "sklearn_isolation_forest": (IsolationForest(n_estimators=100, random_state=0), None),
        "sklearn_knn": (KNeighborsClassifier(5), False),
        "sklearn_gradient_boosting": (
            GradientBoostingClassifier(n_estimators=100, max_depth=3, random_state=0),
            False,
        ),  # fmt: skip
        "sklearn_mixed_pipeline": (mixed, True),
    }


def build_sklearn(out: Path) -> dict:
    import numpy as np
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification

    x, y = make_classification(1000, 20, n_informative=10, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    manifest = {}
    for name, (est, zipmap) in sklearn_models().items():
        est.fit(x, y)
        options = None if zipmap is None else {id(est): {"zipmap": zipmap}}
        if name == "sklearn_mixed_pipeline":
            options = {id(est.steps[-1][1]): {"zipmap": zipmap}}
        onx = to_onnx(est, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=options)
        inputs = [(onx.graph.input[0].name, "float32", ["N", 20], [-3, 3])]
        path = out / f"{name}.onnx"
        path.write_bytes(onx.SerializeToString())
        manifest[name] = entry(path, "sklearn", "skl2onnx", inputs, [1, 100])
        print(f"  {name}", flush=True)
    return manifest


# ------------------------------------------------------------------------- main


def ensure_torch_venv() -> Path:
    python = TORCH_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(TORCH_VENV)], check=True)
    probe = subprocess.run([str(python), "-c", "import torch, onnx, onnxscript"],
                           capture_output=True)  # fmt: skip
    if probe.returncode:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *TORCH_PACKAGES], check=True)
    return python


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-torch", action="store_true", help="scikit-learn models only")
    ap.add_argument("--torch-part", metavar="JSON", help=argparse.SUPPRESS)  # in the torch venv
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.torch_part:
        Path(args.torch_part).write_text(json.dumps(build_torch(OUT)))
        return 0
    manifest_path = OUT / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    sys.path.insert(0, str(ROOT))
    if not args.no_torch:
        python = ensure_torch_venv()
        with tempfile.TemporaryDirectory() as d:
            part = Path(d) / "torch.json"
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            subprocess.run([str(python), __file__, "--torch-part", str(part)], check=True,
                           env=env)  # fmt: skip
            manifest.update(json.loads(part.read_text()))
        build_variants(OUT, manifest)
    manifest.update(build_sklearn(OUT))
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1))
    print(f"wrote {len(manifest)} models into {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
