#!/usr/bin/python3
"""Export small ONNX models with the input layouts featurefs must accept or
refuse at load, for its tests (no downloads, random seeded weights).

    /usr/bin/python3 scripts/export_odd_models.py --out DIR

writes DIR/NAME.onnx for each NAME below: a tiny conv net (conv, relu, conv,
relu, global average pool, flatten, linear) fed in different ways. tiny,
initinputs, batch1 and batch3 have the same weights.

  tiny         one float input [batch, 3, 224, 224] (dynamic batch): accepted
  initinputs   as tiny, with every initializer also listed as a graph input
               (keep_initializers_as_inputs): accepted
  batch1       fixed batch 1 [1, 3, 224, 224]: accepted, batches of 1
  batch3       fixed batch 3 [3, 3, 224, 224]: accepted, batches of exactly 3
  twoinputs    two inputs (an image and a vector): refused
  flat         one input [batch, 150528] (rank 2): refused
  gray         one input [batch, 1, 224, 224] (one channel): refused
  size128      one input [batch, 3, 128, 128] (not the crop size): refused
  uint8        one uint8 input [batch, 3, 224, 224]: refused (not float)
"""
import argparse
import os
import sys

import torch


class Tiny(torch.nn.Module):
    def __init__(self, channels: int = 3):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, 8, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        return self.fc(torch.flatten(x, 1))


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Tiny()
        self.extra = torch.nn.Linear(4, 10)

    def forward(self, x, y):
        return self.net(x) + self.extra(y)


class Flat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3 * 224 * 224, 4)
        self.fc2 = torch.nn.Linear(4, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class FromUint8(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Tiny()

    def forward(self, x):
        return self.net(x.float() / 255.0)


def export(model, args, path, names, dynamic=True, keep_inits=False):
    dyn = None
    if dynamic:
        dyn = {n: {0: "batch"} for n in names}
        dyn["output"] = {0: "batch"}
    tmp = path + ".tmp"
    torch.onnx.export(
        model.eval(), args, tmp,
        opset_version=17,
        input_names=names, output_names=["output"],
        dynamic_axes=dyn,
        do_constant_folding=True,
        keep_initializers_as_inputs=keep_inits,
    )
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="directory to write NAME.onnx into")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    img = lambda n, c=3, s=224: torch.randn(n, c, s, s)
    out = lambda name: os.path.join(args.out, name + ".onnx")

    def tiny():  # the same weights every time
        torch.manual_seed(1)
        return Tiny()

    export(tiny(), (img(1),), out("tiny"), ["input"])
    export(tiny(), (img(1),), out("initinputs"), ["input"], keep_inits=True)
    export(tiny(), (img(1),), out("batch1"), ["input"], dynamic=False)
    export(tiny(), (img(3),), out("batch3"), ["input"], dynamic=False)
    export(TwoInputs(), (img(1), torch.randn(1, 4)), out("twoinputs"), ["input", "extra"])
    export(Flat(), (torch.randn(1, 3 * 224 * 224),), out("flat"), ["input"])
    export(Tiny(channels=1), (img(1, c=1),), out("gray"), ["input"])
    export(Tiny(), (img(1, s=128),), out("size128"), ["input"])
    export(FromUint8(), (torch.randint(0, 255, (1, 3, 224, 224), dtype=torch.uint8),), out("uint8"), ["input"])
    print(f"exported the odd models to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
