"""Export the small models of tests/test_onnx_models_23.py (random weights, opset 17, a
symbolic batch N): an LSTM keyword spotter, a bidirectional GRU tagger on int64 token ids, a
1-D audio CNN on raw 16 kHz samples, a DCGAN generator, a small U-Net (ConvTranspose2d and
bilinear Upsample), a 3-D conv block, and a CNN quantized by onnxruntime's quantize_static
(QDQ format, calibrated on random data). Each is written as NAME.onnx with NAME.npz beside
it: the inputs and PyTorch's outputs -- onnxruntime's for the quantized CNN.

    python tests/models/make_torch_models_23.py   # needs torch and onnxruntime
"""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn


HERE = Path(__file__).resolve().parent


class KeywordSpotter(nn.Module):
    """MFCC frames [N, 49, 10] -> LSTM 64 -> the last step's state -> 12 keywords."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(10, 64, batch_first=True)
        self.fc = nn.Linear(64, 12)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


class GRUTagger(nn.Module):
    """Token ids [N, S] -> Embedding 16 -> bidirectional GRU 24 -> 5 tags per token."""

    def __init__(self, vocab=50, d=16, h=24, tags=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.gru = nn.GRU(d, h, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * h, tags)

    def forward(self, ids):
        y, _ = self.gru(self.emb(ids))
        return self.fc(y)


class AudioCNN(nn.Module):
    """Raw samples [N, 1, 4000] (a quarter second at 16 kHz) -> 10 classes."""

    def __init__(self):
        super().__init__()
        def block(i, o, k, s):
            return [nn.Conv1d(i, o, k, stride=s, padding=k // 2), nn.BatchNorm1d(o),
                    nn.ReLU(), nn.MaxPool1d(2)]
        self.features = nn.Sequential(*block(1, 8, 9, 4), *block(8, 16, 5, 4),
                                      *block(16, 16, 3, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.features(x).mean(-1))


class DCGANGenerator(nn.Module):
    """A latent [N, 32, 1, 1] -> a 3 x 32 x 32 image in [-1, 1]."""

    def __init__(self, z=32, f=12):
        super().__init__()
        def up(i, o):
            return [nn.ConvTranspose2d(i, o, 4, 2, 1, bias=False), nn.BatchNorm2d(o),
                    nn.ReLU()]
        self.net = nn.Sequential(nn.ConvTranspose2d(z, 4 * f, 4, 1, 0, bias=False),
                                 nn.BatchNorm2d(4 * f), nn.ReLU(),       # 4x4
                                 *up(4 * f, 2 * f), *up(2 * f, f),       # 8x8, 16x16
                                 nn.ConvTranspose2d(f, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.net(z)


class UNet(nn.Module):
    """Two levels: one up path a ConvTranspose2d, the other bilinear Upsample + conv; skip
    connections concatenated."""

    def __init__(self, c=8):
        super().__init__()
        def conv(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        self.e1, self.e2, self.mid = conv(3, c), conv(c, 2 * c), conv(2 * c, 4 * c)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.d2 = conv(4 * c, 2 * c)
        self.up1 = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear",
                                             align_corners=False), nn.Conv2d(2 * c, c, 1))
        self.d1 = conv(2 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        e1 = self.e1(x)
        e2 = self.e2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.d2(torch.cat([self.up2(m), e2], 1))
        d1 = self.d1(torch.cat([self.up1(d2), e1], 1))
        return self.out(d1)


class Conv3dBlock(nn.Module):
    """A video clip [N, 3, 8, 16, 16] -> Conv3d, BN, ReLU, MaxPool3d, twice."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(),
                                 nn.MaxPool3d(2),
                                 nn.Conv3d(8, 16, (1, 3, 3), padding=(0, 1, 1)),
                                 nn.BatchNorm3d(16), nn.ReLU(), nn.MaxPool3d((1, 2, 2)))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    """The float model quantized: Conv-ReLU-MaxPool twice, Flatten, Linear."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(16 * 4 * 4, 10))

    def forward(self, x):
        return self.net(x)


def _norms(model):
    """BatchNorm statistics and affines that are not the identity (any rank)."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.weight.data = 1 + 0.2 * torch.randn(m.weight.shape, generator=g)
            m.bias.data = 0.2 * torch.randn(m.bias.shape, generator=g)
            m.running_mean = 0.2 * torch.randn(m.running_mean.shape, generator=g)
            m.running_var = 0.5 + torch.rand(m.running_var.shape, generator=g)


def _onnx_export(model, inputs, path, input_names, output_names, dynamic):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(inputs), str(path), opset_version=17,
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic, dynamo=False)


def export(name, model, inputs, input_names=("x",), output_names=("y",), dynamic=None):
    _norms(model)
    model.eval()
    with torch.no_grad():
        outs = model(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    dynamic = dynamic or {n: {0: "N"} for n in (*input_names, *output_names)}
    _onnx_export(model, inputs, HERE / f"{name}.onnx", list(input_names), list(output_names),
                 dynamic)
    np.savez(HERE / f"{name}.npz",
             **{f"input_{k}": t.numpy() for k, t in enumerate(inputs)},
             **{f"output_{k}": t.numpy() for k, t in enumerate(outs)})
    print(f"wrote {name}.onnx ({(HERE / f'{name}.onnx').stat().st_size // 1024} KiB)")


def export_quantized(name="cnn_qdq"):
    """SmallCNN exported in float, then quantize_static (QDQ, int8 activations and weights,
    per tensor, weights in 7 bits: reduce_range keeps MLAS's AVX2 u8s8 kernels clear of
    their int16 saturation, so onnxruntime's answer is the exact integer one)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    torch.manual_seed(0)
    model = SmallCNN().eval()
    g = torch.Generator().manual_seed(3)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": torch.randn(1, 3, 16, 16, generator=g).numpy()}
                              for _ in range(8)])

        def get_next(self):
            return next(self.data, None)

    with tempfile.TemporaryDirectory() as d:
        fp = Path(d) / "float.onnx"
        _onnx_export(model, [torch.randn(1, 3, 16, 16)], fp, ["x"], ["y"],
                     {"x": {0: "N"}, "y": {0: "N"}})
        quantize_static(str(fp), str(HERE / f"{name}.onnx"), Reader(),
                        quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, reduce_range=True)
    import onnxruntime as ort
    x = torch.randn(2, 3, 16, 16, generator=g).numpy()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(HERE / f"{name}.onnx"), so,
                                providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    np.savez(HERE / f"{name}.npz", input_0=x, output_0=y)
    print(f"wrote {name}.onnx ({(HERE / f'{name}.onnx').stat().st_size // 1024} KiB)")


def main():
    g = torch.Generator().manual_seed(2)
    torch.manual_seed(0)
    export("lstm_kws", KeywordSpotter(), [torch.randn(2, 49, 10, generator=g)])
    torch.manual_seed(0)
    export("gru_tagger", GRUTagger(), [torch.randint(0, 50, (2, 9), generator=g)], ["ids"],
           ["tags"], {"ids": {0: "N", 1: "S"}, "tags": {0: "N", 1: "S"}})
    torch.manual_seed(0)
    export("audio_cnn1d", AudioCNN(), [torch.randn(2, 1, 4000, generator=g)])
    torch.manual_seed(0)
    export("dcgan_generator", DCGANGenerator(), [torch.randn(2, 32, 1, 1, generator=g)])
    torch.manual_seed(0)
    export("unet", UNet(), [torch.randn(1, 3, 16, 16, generator=g)])
    torch.manual_seed(0)
    export("conv3d_block", Conv3dBlock(), [torch.randn(1, 3, 8, 16, 16, generator=g)])
    export_quantized()


if __name__ == "__main__":
    main()
