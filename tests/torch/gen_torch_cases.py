#!/usr/bin/python3
"""Exports CNNs with PyTorch's ONNX exporter as ONNX backend-test cases.

Each case is OUT/<name>/model.onnx plus test_data_set_0/{input_0,output_0}.pb, where the
expected output is PyTorch's own (eval mode), so `mosaic verify OUT --backend all` checks
Mosaic's backends against PyTorch. Weights are random but seeded; batch-norm running
statistics are randomised so that normalisation is not the identity.

usage: gen_torch_cases.py OUT [--only NAME,...]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torchvision
from onnx import numpy_helper


class PaddedCifarNet(nn.Module):
    """The seed's ZeroPad2d + view(x.size(0), -1) pattern: exported with its shape subgraphs."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(3, 2),
            nn.Conv2d(16, 32, 3), nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(2, 2))
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = self.features(x)
        return self.fc(x.view(x.size(0), -1))


class OddOpsNet(nn.Module):
    """Channel shuffle (view/transpose), LeakyReLU, Tanh, Sigmoid, ceil-mode and padded
    average pooling, ReLU6, log-softmax. (PyTorch exports nn.LocalResponseNorm as a
    decomposition with If/Equal rather than as ONNX LRN, so LRN is covered by the ONNX
    node tests instead.)"""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 5, padding=2, dilation=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.avg = nn.AvgPool2d(3, 2, padding=1, count_include_pad=False)
        self.avg2 = nn.AvgPool2d(2, 2, count_include_pad=True)
        self.fc = nn.Linear(8 * 4 * 4, 12)

    def forward(self, x):
        x = nn.functional.leaky_relu(self.c1(x), 0.1)
        n, c, h, w = x.shape
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        x = torch.tanh(self.c2(x)) + torch.sigmoid(x)
        x = nn.functional.relu6(self.avg(self.pool(x)) * 3.0)
        x = self.avg2(x)
        return torch.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


def models():
    tv = torchvision.models
    return {
        "resnet18": (lambda: tv.resnet18(weights=None), 64),
        "mobilenet_v2": (lambda: tv.mobilenet_v2(weights=None), 64),
        "squeezenet1_1": (lambda: tv.squeezenet1_1(weights=None), 64),
        "regnet_x_400mf": (lambda: tv.regnet_x_400mf(weights=None), 64),
        "googlenet": (lambda: tv.googlenet(weights=None, aux_logits=False, init_weights=True), 64),
        "densenet121": (lambda: tv.densenet121(weights=None), 64),
        "efficientnet_b0": (lambda: tv.efficientnet_b0(weights=None), 64),
        "padded_cifar_net": (PaddedCifarNet, 32),
        "odd_ops_net": (OddOpsNet, 32),
    }


def randomise_bn(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def export_case(name, make, size, out_dir, batch=2):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = make()
    randomise_bn(model, gen)
    model.eval()
    x = torch.rand(batch, 3, size, size, generator=gen)
    with torch.no_grad():
        y = model(x)
    case = os.path.join(out_dir, "test_" + name)
    os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
    torch.onnx.export(model, x, os.path.join(case, "model.onnx"), opset_version=13,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      do_constant_folding=(name != "padded_cifar_net"))
    for kind, t in (("input_0", x), ("output_0", y)):
        with open(os.path.join(case, "test_data_set_0", kind + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy()).SerializeToString())
    print("exported", case)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(2)
    only = set(filter(None, args.only.split(",")))
    for name, (make, size) in models().items():
        if only and name not in only:
            continue
        export_case(name, make, size, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
