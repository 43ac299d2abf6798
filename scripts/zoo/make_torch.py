"""PyTorch models through both exporters: TorchScript (dynamo=False, opset 17) and dynamo
(opsets 18, 20, 23). Seeded random weights; the source framework's outputs are staged too.

Runs in its own venv (build.sh: torch==2.13.0, onnxscript, onnx).
"""

from __future__ import annotations

import tempfile
import traceback
from pathlib import Path

import torch
from stage import stage
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class AttentionBlock(nn.Module):
    """nn.MultiheadAttention with a causal mask and a key padding mask, then a GELU MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))

    def forward(self, x, pad):
        n = x.shape[1]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        y, _ = self.attn(x, x, x, attn_mask=causal, key_padding_mask=pad, need_weights=False)
        x = self.norm(x + y)
        return x + self.mlp(x)


class AudioFrontEnd(nn.Module):
    """STFT -> power -> mel projection -> log -> 1-D convs -> pooled logits."""

    def __init__(self, n_fft=64, hop=16, mels=16):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.mel = nn.Parameter(torch.rand(n_fft // 2 + 1, mels))
        self.conv = nn.Sequential(nn.Conv1d(mels, 24, 3, padding=1), nn.ReLU(),
                                  nn.Conv1d(24, 8, 3, stride=2))  # fmt: skip

    def forward(self, audio):  # [batch, samples]
        # return_complex=False: the TorchScript exporter has no complex tensors (it writes an
        # STFT of the rank-2 signal, which onnxruntime takes as real)
        spec = torch.stft(audio, self.n_fft, self.hop, window=self.window, center=False,
                          return_complex=False)  # fmt: skip
        power = spec[..., 0] ** 2 + spec[..., 1] ** 2  # [batch, bins, frames]
        mel = torch.log(torch.matmul(power.transpose(1, 2), self.mel) + 1e-6)
        return self.conv(mel.transpose(1, 2)).mean(-1)


class ComplexFrontEnd(AudioFrontEnd):
    """The same with complex tensors (dynamo only: STFT/DFT with complex results, abs)."""

    def forward(self, audio):
        spec = torch.stft(audio, self.n_fft, self.hop, window=self.window, center=True,
                          return_complex=True)  # fmt: skip
        power = spec.abs() ** 2
        mel = torch.log(torch.matmul(power.transpose(1, 2), self.mel) + 1e-6)
        return self.conv(mel.transpose(1, 2)).mean(-1)


class Spectrum(nn.Module):
    """rfft magnitude and an irfft round trip (DFT, with onesided and inverse)."""

    def forward(self, x):  # [batch, n]
        spec = torch.view_as_real(torch.fft.rfft(x, dim=-1))
        mag = spec.pow(2).sum(-1).sqrt()
        back = torch.fft.irfft(torch.fft.rfft(x * 0.5, dim=-1), n=x.shape[-1], dim=-1)
        return mag, back


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(12, 24, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(48, 16, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, h = self.gru(y)
        return self.head(y[:, -1]), h


class Vision(nn.Module):
    """Convs, BatchNorm, depthwise conv, interpolate (nearest and bilinear), pooling."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.Hardswish())
        self.dw = nn.Conv2d(8, 8, 3, 1, 1, groups=8)
        self.pw = nn.Conv2d(8, 16, 1)
        self.up = nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x):
        y = self.pw(F.silu(self.dw(self.stem(x))))
        a = F.interpolate(y, scale_factor=2.0, mode="nearest")
        b = F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False)
        z = self.up(a + b)
        return z, F.adaptive_avg_pool2d(z, 1).flatten(1).softmax(-1)


class Fold(nn.Module):
    """unfold -> linear mixing -> fold (Col2Im in opset 18+)."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(3 * 4, 3 * 4)

    def forward(self, x):
        cols = F.unfold(x, kernel_size=2, stride=2)  # [n, 12, L]
        cols = self.mix(cols.transpose(1, 2)).transpose(1, 2)
        return F.fold(cols, output_size=x.shape[-2:], kernel_size=2, stride=2)


class ScriptedLoop(nn.Module):
    """A data-dependent loop and branch (TorchScript: Loop and If)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, steps: torch.Tensor):
        for _ in range(int(steps)):
            x = torch.tanh(self.lin(x))
        if bool(x.sum() > 0):
            x = x * 2
        else:
            x = x - 1
        return x


class CondModel(nn.Module):
    """torch.cond (dynamo: an If with two subgraphs)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: self.a(v).relu(), lambda v: self.b(v).sigmoid(),
                          (x,))  # fmt: skip


def _inputs():
    g = torch.Generator().manual_seed(1)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 7:] = True
    return {
        "attention": (AttentionBlock(), (torch.randn(2, 10, 32, generator=g), pad), ["x", "pad"]),
        "audio": (AudioFrontEnd(), (torch.randn(2, 800, generator=g),), ["audio"]),
        "audio_complex": (ComplexFrontEnd(), (torch.randn(2, 800, generator=g),), ["audio"]),
        "fft": (Spectrum(), (torch.randn(2, 64, generator=g),), ["x"]),
        "recurrent": (Recurrent(), (torch.randn(3, 7, 12, generator=g),), ["x"]),
        "vision": (Vision(), (torch.randn(2, 3, 32, 32, generator=g),), ["image"]),
        "fold": (Fold(), (torch.randn(2, 3, 8, 8, generator=g),), ["x"]),
        "cond": (CondModel(), (torch.randn(2, 8, generator=g),), ["x"]),
    }


def _export(model, args, names, path: Path, opset: int, dynamo: bool) -> None:
    kwargs = {"input_names": names, "opset_version": opset, "dynamo": dynamo}
    if dynamo:
        kwargs["external_data"] = False  # one self-contained file
    else:
        kwargs["dynamic_axes"] = {names[0]: {0: "batch"}}
    torch.onnx.export(model, args, str(path), **kwargs)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    failures = []
    for name, (model, args, names) in _inputs().items():
        model.eval()
        with torch.no_grad():
            out = model(*args)
        outs = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
        feeds = {n: a.numpy() for n, a in zip(names, args)}
        variants = [("torchscript", 17, False), ("torchscript", 18, False), ("dynamo", 18, True),
                    ("dynamo", 20, True),
                    ("dynamo", 23, True)]  # fmt: skip
        for exporter, opset, dynamo in variants:
            if name in ("cond", "audio_complex") and not dynamo:
                continue  # torch.cond and complex tensors are dynamo's
            path = tmp / f"{name}_{exporter}_op{opset}.onnx"
            try:
                _export(model, args, names, path, opset, dynamo)
            except Exception:
                failures.append((name, exporter, opset, traceback.format_exc(limit=2)))
                continue
            stage(f"torch-{exporter}", f"{name}_op{opset}", path, feeds, framework=outs)
    scripted = torch.jit.script(ScriptedLoop().eval())
    x, steps = torch.randn(2, 8), torch.tensor(3)
    with torch.no_grad():
        out = scripted(x, steps)
    path = tmp / "loop.onnx"
    try:
        torch.onnx.export(scripted, (x, steps), str(path), input_names=["x", "steps"],
                          opset_version=17, dynamo=False)  # fmt: skip
        stage("torch-torchscript", "loop_if_op17", path, {"x": x.numpy(), "steps": steps.numpy()},
              framework=[out.numpy()])  # fmt: skip
    except Exception:
        failures.append(("loop", "torchscript", 17, traceback.format_exc(limit=2)))
    for f in failures:
        print("export failed:", *f[:3], f[3].strip().splitlines()[-1])


if __name__ == "__main__":
    main()
