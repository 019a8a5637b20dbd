#!/usr/bin/python3
"""Exports PyTorch's open-ended slices with PyTorch 1.13's ONNX exporter as ONNX backend-test cases.

`x[:, 1:]` is exported as a Slice whose `ends` is INT64_MAX, `x[..., :-1]` and `x[::2]` likewise
with extreme or negative bounds, and `x.flip` / negative steps with INT64_MIN. Any loader that
reads those int64 constants through a double turns INT64_MAX into INT64_MIN and computes an
empty tensor on every backend, which a check against the naive oracle cannot see (issue 50, W1):
these cases compare every backend with PyTorch's own outputs. Each case is
OUT/test_slice_<name>_op<N>/model.onnx plus test_data_set_0/{input_0,output_0}.pb.

usage: gen_slice_cases.py OUT [--opsets 11,13,17]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
from onnx import numpy_helper


class Fn(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


# name -> (the slice as a user writes it, the input's shape)
CASES = {
    "tail_times_two": (lambda x: x[:, 1:] * 2, (2, 5)),                 # ends = INT64_MAX
    "drop_last": (lambda x: x[..., :-1] + 1, (2, 3, 4)),                # ends = -1
    "every_other_row": (lambda x: x[::2] - 1, (5, 3)),                  # step 2, ends = INT64_MAX
    "last_three": (lambda x: x[:, -3:] * x[:, :3], (2, 6)),             # starts = -3
    "middle_every_third": (lambda x: x[:, 1::3].relu(), (3, 10)),       # step 3 from 1 to the end
    "flip_last_axis": (lambda x: torch.flip(x, [-1]) * 3, (2, 4)),      # step -1 from -1 to INT64_MIN
    "empty_then_cat": (lambda x: torch.cat([x[:, 4:], x], 1) * 2, (2, 4)),  # a legal empty Slice
    "start_past_end": (lambda x: torch.cat([x[:, 7:9], x[:, :2]], 1) + 1, (2, 5)),
    "narrow_both_axes": (lambda x: x[1:, :-2] * x[:-1, 2:], (4, 6)),
}


def export_case(name, f, shape, opset, out_dir):
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(*shape, generator=gen) * 2 - 1
    model = Fn(f).eval()
    with torch.no_grad():
        y = model(x)
    case = os.path.join(out_dir, "test_slice_%s_op%d" % (name, opset))
    os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
    torch.onnx.export(model, x, os.path.join(case, "model.onnx"), opset_version=opset,
                      input_names=["input"], output_names=["output"])
    for kind, t in (("input_0", x), ("output_0", y)):
        with open(os.path.join(case, "test_data_set_0", kind + ".pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(t.numpy()).SerializeToString())
    print("exported", case)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--opsets", default="11,13,17")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (f, shape) in CASES.items():
        for opset in (int(o) for o in args.opsets.split(",")):
            export_case(name, f, shape, opset, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
