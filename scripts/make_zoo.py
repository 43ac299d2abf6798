"""Build the real-model zoo: small PyTorch models exported to ONNX, plus quantized variants.

Dev-time only (needs torch, onnxscript, onnx, onnxruntime); the outputs are committed under
tests/models/ so neither CI nor the tests need torch.

    python scripts/make_zoo.py            # rebuild everything into tests/models/
    python scripts/make_zoo.py --only gpt # rebuild the models whose name contains "gpt"
    python scripts/make_zoo.py --bench    # the realistic-size benchmark zoo, benchmarks/models/

Every model has a dynamic batch axis. The fixture widths are small so each file stays well
under 2 MB. The benchmark zoo (--bench, gitignored) builds the same architectures at realistic
sizes (ResNet-18-like at 224x224, MobileNetV3-small-like at 224x224, GPT/BERT/Llama with d=256,
4 layers, seq 128, LSTM/GRU hidden 256 over 64 steps, U-Net at 128x128), without the
onnxruntime-optimized and external-data variants.
Each family is exported with the TorchScript exporter (opset 17) and the dynamo exporter
(opset 18); the CNN, MobileNet, GPT and BERT models are also quantized with
onnxruntime.quantization (dynamic, static QDQ, static QOperator). manifest.json records, for
every file, how to make its feeds (tests/test_real_models.py and benchmarks/zoo.py read it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn
from torch.export import Dim
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.zoo import BENCH_DIR, ZOO_DIR, make_feeds  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Architectures (plain torch.nn: torchvision is not available)
# ---------------------------------------------------------------------------------------------


class PreActBlock(nn.Module):
    """ResNet v2 block: BN -> ReLU -> conv, twice, plus a (projected) residual add.

    Pre-activation keeps BatchNormalization nodes in the export (exporters fold BN that
    directly follows a conv, but not BN that follows an Add).
    """

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x):
        out = F.relu(self.bn1(x))
        shortcut = self.proj(out) if self.proj is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


class ResNet(nn.Module):
    """Two pre-activation blocks per width; the first stage keeps the stem's resolution.

    The fixture defaults keep full resolution (32x32 inputs); ResNet-18's 7x7/2 stem and 3x3/2
    max pool (stem_kernel=7, stem_stride=2, pool_stride=2) suit 224x224 inputs.
    """

    def __init__(
        self,
        widths=(16, 32, 64),
        classes: int = 10,
        stem_kernel: int = 3,
        stem_stride: int = 1,
        pool_stride: int = 1,
    ):
        super().__init__()
        stem = nn.Conv2d(3, widths[0], stem_kernel, stem_stride, stem_kernel // 2, bias=False)
        self.stem = nn.Sequential(stem, nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks += [PreActBlock(cin, w, 1 if i == 0 else 2), PreActBlock(w, w, 1)]
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(cin)
        self.pool = nn.MaxPool2d(3, pool_stride, 1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.pool(self.stem(x)))
        x = F.relu(self.bn(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, r: int = 4):
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // r, 1)
        self.fc2 = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    """MobileNetV3 block: 1x1 expand, depthwise 3x3, squeeze-excite, 1x1 project."""

    def __init__(self, cin: int, cexp: int, cout: int, stride: int, se: bool, kernel: int = 3):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, cexp, 1, bias=False), nn.BatchNorm2d(cexp))
        dw = nn.Conv2d(cexp, cexp, kernel, stride, kernel // 2, groups=cexp, bias=False)
        self.dw = nn.Sequential(dw, nn.BatchNorm2d(cexp))
        self.se = SqueezeExcite(cexp) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(cexp, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = F.hardswish(self.expand(x))
        y = self.se(F.hardswish(self.dw(y)))
        y = self.project(y)
        return x + y if self.residual else y


# InvertedResidual arguments (cin, cexp, cout, stride, se[, kernel]) per block
MOBILENET_FIXTURE = (
    (16, 32, 16, 1, True),
    (16, 48, 24, 2, False),
    (24, 64, 24, 1, True),
    (24, 96, 40, 2, True),
)
# MobileNetV3-small's bottlenecks (every block expands, every activation is hardswish)
MOBILENET_V3_SMALL = (
    (16, 16, 16, 2, True),
    (16, 72, 24, 2, False),
    (24, 88, 24, 1, False),
    (24, 96, 40, 2, True, 5),
    (40, 240, 40, 1, True, 5),
    (40, 240, 40, 1, True, 5),
    (40, 120, 48, 1, True, 5),
    (48, 144, 48, 1, True, 5),
    (48, 288, 96, 2, True, 5),
    (96, 576, 96, 1, True, 5),
    (96, 576, 96, 1, True, 5),
)


class MobileNet(nn.Module):
    def __init__(
        self, classes: int = 10, blocks=MOBILENET_FIXTURE, head: int = 96, hidden: int = 64
    ):
        super().__init__()
        stem = blocks[0][0]
        self.stem = nn.Sequential(
            nn.Conv2d(3, stem, 3, 2, 1, bias=False), nn.BatchNorm2d(stem), nn.Hardswish()
        )
        self.blocks = nn.Sequential(*(InvertedResidual(*b) for b in blocks))
        self.head = nn.Sequential(nn.Conv2d(blocks[-1][2], head, 1), nn.Hardswish())
        self.fc = nn.Sequential(
            nn.Linear(head, hidden), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(hidden, classes)
        )

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, max_len: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        # -1e4 as GPT-2 did (not -inf): keeps calibration ranges finite for static quantization
        att = att.masked_fill(~self.mask[:t, :t], -1e4)
        y = F.softmax(att, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int, max_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, max_len)
        self.ln2 = nn.LayerNorm(d)
        # GPT-2's tanh approximation of GELU ("gelu_new")
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU("tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(
        self, vocab: int = 256, d: int = 64, heads: int = 4, layers: int = 2, max_len: int = 32
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.Sequential(*[GPTBlock(d, heads, max_len) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device)).unsqueeze(0)
        return self.head(self.ln(self.blocks(x)))


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaBlock(nn.Module):
    """A Llama-style block: RMSNorm, rotary positions, fused SDPA (causal), SwiGLU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.norm2 = nn.RMSNorm(d, eps=1e-6)
        self.gate = nn.Linear(d, 2 * d, bias=False)
        self.up = nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(
        self, vocab: int = 256, d: int = 64, heads: int = 4, layers: int = 2, max_len: int = 32
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([LlamaBlock(d, heads) for _ in range(layers)])
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        angles = torch.outer(torch.arange(max_len).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, ids):
        t = ids.shape[1]
        x, cos, sin = self.tok(ids), self.cos[:t], self.sin[:t]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


class BERT(nn.Module):
    """nn.TransformerEncoder over token + position + segment embeddings, padding mask input."""

    def __init__(
        self,
        vocab: int = 256,
        d: int = 64,
        heads: int = 4,
        layers: int = 2,
        max_len: int = 32,
        ffn: int | None = None,  # the feed-forward width, 2 * d unless given
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(
            d, heads, ffn or 2 * d, dropout=0.1, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(d, d)
        self.cls = nn.Linear(d, 2)

    def forward(self, ids, attention_mask):
        t = ids.shape[1]
        x = self.norm(self.tok(ids) + self.pos(torch.arange(t, device=ids.device)).unsqueeze(0))
        # additive float mask as BERT does ((1 - mask) * -10000), finite for quantization
        padding = (1.0 - attention_mask.to(x.dtype)) * -1e4
        h = self.encoder(x, src_key_padding_mask=padding)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        return h, self.cls(pooled)


class RNN(nn.Module):
    def __init__(self, kind: str, features: int = 16, hidden: int = 32, classes: int = 5):
        super().__init__()
        cls = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = cls(features, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y)


class ConvNorm(nn.Module):
    def __init__(self, cin: int, cout: int, norm: str):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=0)
        self.norm = (
            nn.GroupNorm(4, cout) if norm == "group" else nn.InstanceNorm2d(cout, affine=True)
        )
        self.act = nn.SiLU() if norm == "group" else nn.LeakyReLU(0.1)

    def forward(self, x):
        # explicit reflect padding -> an ONNX Pad node rather than a Conv pads attribute
        return self.act(self.norm(self.conv(F.pad(x, (1, 1, 1, 1), mode="reflect"))))


class UNet(nn.Module):
    def __init__(self, c: int = 8):
        super().__init__()
        self.enc1 = ConvNorm(3, c, "group")
        self.enc2 = ConvNorm(c, 2 * c, "instance")
        self.mid = ConvNorm(2 * c, 4 * c, "group")
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = ConvNorm(4 * c, 2 * c, "instance")
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec1 = ConvNorm(2 * c + c, c, "group")
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.avg_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        up = F.interpolate(d2, scale_factor=2.0, mode="nearest")
        d1 = self.dec1(torch.cat([self.up1(d2) + up, e1], 1))
        return torch.sigmoid(self.out(d1))


# ---------------------------------------------------------------------------------------------
# The zoo: name -> (constructor, input specs, output names), per size preset
# An input spec: name, dtype, shape ("N" = the dynamic batch axis), value range [low, high).
# ---------------------------------------------------------------------------------------------

# fixture: the architectures' defaults (tiny); bench: realistic sizes for benchmarks/run.py
PRESETS = {
    "fixture": dict(image=32, unet_image=32, vocab=256, seq=16, rnn_steps=12, rnn_features=16),
    "bench": dict(image=224, unet_image=128, vocab=2000, seq=128, rnn_steps=64, rnn_features=64),
}
_TEXT = dict(vocab=2000, d=256, heads=4, layers=4, max_len=128)
BENCH_KWARGS = {
    "resnet": dict(
        widths=(64, 128, 256, 512), classes=1000, stem_kernel=7, stem_stride=2, pool_stride=2
    ),
    "mobilenet": dict(classes=1000, blocks=MOBILENET_V3_SMALL, head=576, hidden=1024),
    "gpt": _TEXT,
    "llama": _TEXT,
    "bert": dict(_TEXT, ffn=4 * 256),
    "lstm": dict(features=64, hidden=256),
    "gru": dict(features=64, hidden=256),
    "unet": dict(c=32),
}


def families(preset: str = "fixture") -> dict:
    p = PRESETS[preset]
    kw = BENCH_KWARGS if preset == "bench" else {}
    image = ("x", "float32", ["N", 3, p["image"], p["image"]], [-1, 1])
    ids = ("input_ids", "int64", ["N", p["seq"]], [0, p["vocab"]])
    mask = ("attention_mask", "int64", ["N", p["seq"]], [0, 2])
    steps = ("x", "float32", ["N", p["rnn_steps"], p["rnn_features"]], [-1, 1])
    unet = ("x", "float32", ["N", 3, p["unet_image"], p["unet_image"]], [0, 1])

    def make(cls, family, *args):
        return lambda: cls(*args, **kw.get(family, {}))

    return {
        "resnet": (make(ResNet, "resnet"), [image], ["logits"]),
        "mobilenet": (make(MobileNet, "mobilenet"), [image], ["logits"]),
        "gpt": (make(GPT, "gpt"), [ids], ["logits"]),
        "llama": (make(Llama, "llama"), [ids], ["logits"]),
        "bert": (make(BERT, "bert"), [ids, mask], ["last_hidden_state", "logits"]),
        "lstm": (make(RNN, "lstm", "lstm"), [steps], ["y"]),
        "gru": (make(RNN, "gru", "gru"), [steps], ["y"]),
        "unet": (make(UNet, "unet"), [unet], ["mask"]),
    }


FAMILIES = families("fixture")
QUANTIZED = ("resnet", "mobilenet", "gpt", "bert", "unet")
# (exporter, opset) per family: TorchScript at 17 and dynamo at 18 for all where they work
# (TorchScript cannot export aten::rms_norm), plus newer opsets where the dynamo exporter emits
# newer ops (opset 23: Attention, RMSNormalization)
EXPORTS = {family: [("torchscript", 17), ("dynamo", 18)] for family in FAMILIES}
EXPORTS["llama"] = [("dynamo", 18), ("dynamo", 23)]
EXPORTS["gpt"].append(("dynamo", 23))
EXPORTS["unet"].append(("dynamo", 21))
# onnxruntime 1.31's QOperator quantizer drops the output of the attention-scale Mul when it
# feeds a Where (error "unknown initializers/tensors .../attn/Mul_output_0"): leave Mul float
QOPERATOR_SKIP = {"gpt": ["Mul"]}


def build(spec: tuple) -> nn.Module:
    """The eval-mode torch model of a family spec (constructor, inputs, outputs)."""
    torch.manual_seed(0)
    model = spec[0]()
    # non-trivial BatchNorm statistics, as a trained model would have
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


def export(spec: tuple, exporter: str, opset: int, path: Path) -> None:
    model = build(spec)
    _, inputs, outputs = spec
    # export at batch 2: the dynamo exporter specializes a size-1 sample dim to the constant 1
    feeds = make_feeds(inputs, 2, seed=0)
    args = tuple(torch.from_numpy(feeds[name]) for name, *_ in inputs)
    names = [name for name, *_ in inputs]
    if exporter == "torchscript":
        dyn = {n: {0: "batch"} for n in names + outputs}
        torch.onnx.export(
            model, args, str(path), dynamo=False, opset_version=opset, input_names=names,
            output_names=outputs, dynamic_axes=dyn,
        )  # fmt: skip
    else:
        batch = Dim("batch", min=1, max=64)
        program = torch.onnx.export(
            model, args, dynamo=True, opset_version=opset, input_names=names, output_names=outputs,
            dynamic_shapes=tuple({0: batch} for _ in names), optimize=True, verbose=False,
        )  # fmt: skip
        program.save(str(path))
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))  # one file: the dynamo exporter may write a side .data file
    side = path.with_name(path.name + ".data")
    if side.exists():
        side.unlink()


class Calibration:
    """onnxruntime.quantization.CalibrationDataReader over a few random batches."""

    def __init__(self, inputs: list, batches: int = 8):
        self.data = iter([make_feeds(inputs, 2, seed=100 + i) for i in range(batches)])

    def get_next(self):
        return next(self.data, None)


def quantize(family: str, inputs: list, src: Path, mode: str, dst: Path) -> None:
    from onnxruntime import quantization as q
    from onnxruntime.quantization.registry import QLinearOpsRegistry
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # onnxruntime's tools write temporary files into the working directory: keep them out of ours
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        src, dst = src.resolve(), dst.resolve()
        pre = Path(tmp) / "pre.onnx"
        try:
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=False)
        except Exception:  # onnxruntime's symbolic shape inference fails on some Reshapes/Resizes
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        if mode == "dynamic":
            q.quantize_dynamic(str(pre), str(dst), weight_type=q.QuantType.QUInt8)
        else:
            fmt = q.QuantFormat.QDQ if mode == "qdq" else q.QuantFormat.QOperator
            ops = None
            if mode == "qoperator" and family in QOPERATOR_SKIP:
                ops = [o for o in QLinearOpsRegistry if o not in QOPERATOR_SKIP[family]]
            q.quantize_static(
                str(pre), str(dst), Calibration(inputs), quant_format=fmt,
                activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                per_channel=mode == "qdq", op_types_to_quantize=ops,
            )  # fmt: skip


# onnxruntime-optimized variants: the com.microsoft fused ops that real deployed models carry.
# "fused": onnxruntime.transformers.optimizer (SkipLayerNormalization, BiasGelu, FastGelu, ...)
# "extended": the model an onnxruntime session saves at ORT_ENABLE_EXTENDED (FusedConv,
# FusedMatMul, FusedGemm, BiasGelu, ...)
ORT_FUSED = {"bert": ("bert_dynamo_op18", "bert"), "gpt": ("gpt_dynamo_op18", "gpt2")}
ORT_EXTENDED = {"resnet": "resnet_torchscript_op17", "gpt": "gpt_torchscript_op17"}
ORT_EXTENDED["bert"] = "bert_torchscript_op17"


def ort_fuse(src: Path, model_type: str, dst: Path) -> None:
    from onnxruntime.transformers import optimizer

    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        model = optimizer.optimize_model(
            str(src), model_type=model_type, num_heads=4, hidden_size=64, opt_level=0
        )
        model.save_model_to_file(str(dst))


def ort_extended(src: Path, dst: Path) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])


def save_external(src: Path, dst: Path) -> None:
    """A copy of src with every initializer in a side file dst.data."""
    proto = onnx.load(str(src))
    data = dst.name + ".data"
    if (dst.parent / data).exists():
        (dst.parent / data).unlink()
    onnx.save_model(proto, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data, size_threshold=0)  # fmt: skip


def op_histogram(path: Path) -> dict[str, int]:
    proto = onnx.load(str(path), load_external_data=False)
    hist: dict[str, int] = {}
    for node in proto.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        hist[key] = hist.get(key, 0) + 1
    return dict(sorted(hist.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="substring of the model names to build")
    parser.add_argument(
        "--bench", action="store_true", help=f"realistic sizes into {BENCH_DIR.relative_to(ROOT)}/"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: the preset's)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    table = families("bench" if args.bench else "fixture")
    out = (args.out or (BENCH_DIR if args.bench else ZOO_DIR)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    # a full rebuild starts a fresh manifest; a partial one updates its entries
    manifest = json.loads(manifest_path.read_text()) if args.only and manifest_path.exists() else {}

    def record(name: str, family: str, exporter: str, opset: int, **extra) -> None:
        path = out / f"{name}.onnx"
        proto = onnx.load(str(path), load_external_data=False)
        opsets = {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
        manifest[name] = {
            "file": path.name,
            "family": family,
            "exporter": exporter,
            "opset": opsets.get("ai.onnx", opset),
            "opsets": opsets,
            "inputs": table[family][1],
            "bytes": path.stat().st_size,
            "ops": op_histogram(path),
            **extra,
        }
        print(f"{name:32s} {path.stat().st_size / 1024:8.1f} KiB  {len(proto.graph.node):4d} nodes")

    for family, spec in table.items():
        for exporter, opset in EXPORTS[family]:
            name = f"{family}_{exporter}_op{opset}"
            if args.only not in name:
                continue
            try:
                export(spec, exporter, opset, out / f"{name}.onnx")
            except Exception as exc:  # record what does not export, keep building the rest
                print(
                    f"{name}: export failed: {type(exc).__name__}: {str(exc)[:300]}",
                    file=sys.stderr,
                )
                continue
            record(name, family, exporter, opset)
        if family in QUANTIZED:
            src = out / f"{family}_{'_op'.join(map(str, EXPORTS[family][0]))}.onnx"
            for mode in ("dynamic", "qdq", "qoperator"):
                name = f"{family}_quant_{mode}"
                if args.only not in name:
                    continue
                try:
                    quantize(family, spec[1], src, mode, out / f"{name}.onnx")
                except Exception as exc:
                    print(
                        f"{name}: quantization failed: {type(exc).__name__}: {exc}", file=sys.stderr
                    )
                    continue
                record(name, family, *EXPORTS[family][0], quantization=mode)
        if args.bench:  # the onnxruntime-optimized and external-data variants: fixtures only
            continue
        if family in ORT_FUSED and args.only in f"{family}_ort_fused":
            src_name, model_type = ORT_FUSED[family]
            ort_fuse(out / f"{src_name}.onnx", model_type, out / f"{family}_ort_fused.onnx")
            exporter, opset = src_name.split("_")[1], int(src_name.split("_op")[1])
            record(f"{family}_ort_fused", family, exporter, opset, ort_optimized="transformers")
        if family in ORT_EXTENDED and args.only in f"{family}_ort_extended":
            src_name = ORT_EXTENDED[family]
            ort_extended(out / f"{src_name}.onnx", out / f"{family}_ort_extended.onnx")
            exporter, opset = src_name.split("_")[1], int(src_name.split("_op")[1])
            record(f"{family}_ort_extended", family, exporter, opset, ort_optimized="extended")

    name = "resnet_external_data"
    if args.only in name and not args.bench:
        save_external(out / "resnet_torchscript_op17.onnx", out / f"{name}.onnx")
        record(name, "resnet", "torchscript", 17, external_data=f"{name}.onnx.data")

    manifest = dict(sorted(manifest.items()))
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(f.stat().st_size for f in out.iterdir())
    print(f"{len(manifest)} models, {total / 2**20:.2f} MiB in {out}")


if __name__ == "__main__":
    os.environ.setdefault("TORCH_LOGS", "")
    main()
