"""Export the small PyTorch models of tests/test_onnx_models.py (random weights, opset 17):
a BERT-style encoder on int64 token ids with an attention mask, a ViT, a MobileNetV3 block
with Hardswish and squeeze-excite, and a GPT-style decoder block with a causal mask. Each is
written as NAME.onnx with NAME.npz beside it: the inputs and PyTorch's outputs.

    python tests/models/make_torch_models.py      # needs torch (pip install torch)
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent


class SelfAttention(nn.Module):
    def __init__(self, d, heads, causal=False):
        super().__init__()
        self.h, self.dk, self.causal = heads, d // heads, causal
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, mask=None):            # mask: [B, S] of 1 (keep) and 0 (pad)
        b, s, d = x.shape
        def heads(t):
            return t.view(b, s, self.h, self.dk).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
        if mask is not None:                     # as BERT: (1 - mask) * -10000 added
            scores = scores + (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        if self.causal:
            keep = torch.tril(torch.ones(s, s, dtype=torch.bool, device=x.device))
            scores = scores.masked_fill(~keep, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        return self.o((att @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d, heads, ff, pre_norm, causal=False, act=None):
        super().__init__()
        self.att = SelfAttention(d, heads, causal)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), act or nn.GELU(), nn.Linear(ff, d))
        self.pre = pre_norm

    def forward(self, x, mask=None):
        if self.pre:
            x = x + self.att(self.ln1(x), mask)
            return x + self.ff(self.ln2(x))
        x = self.ln1(x + self.att(x, mask))
        return self.ln2(x + self.ff(x))


class Bert(nn.Module):
    def __init__(self, vocab=100, d=32, heads=4, ff=64, layers=2, max_len=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(Block(d, heads, ff, False) for _ in range(layers))
        self.pool = nn.Linear(d, d)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.tok(ids) + self.pos(pos)[None])
        for b in self.blocks:
            x = b(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


class ViT(nn.Module):
    def __init__(self, d=32, heads=4, ff=64, layers=2, patch=4, image=16, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, ff, True) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x)[:, 0])


class MobileNetV3Block(nn.Module):
    def __init__(self, c=16, expand=64, se=16):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, expand, 1, bias=False), nn.BatchNorm2d(expand),
                                    nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(expand, expand, 3, padding=1, groups=expand,
                                          bias=False), nn.BatchNorm2d(expand), nn.Hardswish())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(expand, se, 1), nn.ReLU(),
                                nn.Conv2d(se, expand, 1), nn.Hardsigmoid())
        self.project = nn.Sequential(nn.Conv2d(expand, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        h = self.dw(self.expand(x))
        return x + self.project(h * self.se(h))


class GPTBlock(nn.Module):
    def __init__(self, vocab=100, d=32, heads=4, ff=128, max_len=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.block = Block(d, heads, ff, True, causal=True, act=nn.GELU(approximate="tanh"))
        self.ln = nn.LayerNorm(d)
        self.lm = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.lm(self.ln(self.block(self.tok(ids) + self.pos(pos)[None])))


def _randomize_norms(model):
    """BatchNorm statistics and LayerNorm affines that are not the identity."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
            m.weight.data = 1 + 0.2 * torch.randn(m.weight.shape, generator=g)
            m.bias.data = 0.2 * torch.randn(m.bias.shape, generator=g)
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean = 0.2 * torch.randn(m.running_mean.shape, generator=g)
            m.running_var = 0.5 + torch.rand(m.running_var.shape, generator=g)


def export(name, model, inputs, input_names, output_names, dynamic):
    torch.manual_seed(0)
    _randomize_norms(model)
    model.eval()
    with torch.no_grad():
        outs = model(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(inputs), str(HERE / f"{name}.onnx"), opset_version=17,
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic, dynamo=False)
    np.savez(HERE / f"{name}.npz",
             **{f"input_{k}": t.numpy() for k, t in enumerate(inputs)},
             **{f"output_{k}": t.numpy() for k, t in enumerate(outs)})
    print(f"wrote {name}.onnx ({(HERE / f'{name}.onnx').stat().st_size // 1024} KiB)")


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 100, (2, 12), generator=g)
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 8:] = 0                                   # the second sequence is padded
    export("bert_encoder", Bert(), [ids, mask], ["input_ids", "attention_mask"],
           ["hidden", "pooled"], {"input_ids": {0: "N", 1: "S"},
                                  "attention_mask": {0: "N", 1: "S"},
                                  "hidden": {0: "N", 1: "S"}, "pooled": {0: "N"}})
    torch.manual_seed(0)
    export("vit", ViT(), [torch.randn(2, 3, 16, 16, generator=g)], ["image"], ["logits"],
           {"image": {0: "N"}, "logits": {0: "N"}})
    torch.manual_seed(0)
    export("mobilenetv3_block", MobileNetV3Block(), [torch.randn(1, 16, 14, 14, generator=g)],
           ["x"], ["y"], {"x": {0: "N"}, "y": {0: "N"}})
    torch.manual_seed(0)
    export("gpt_block", GPTBlock(), [torch.randint(0, 100, (2, 10), generator=g)], ["ids"],
           ["logits"], {"ids": {0: "N", 1: "S"}, "logits": {0: "N", 1: "S"}})


if __name__ == "__main__":
    main()
