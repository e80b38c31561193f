#!/usr/bin/python3
"""Export versions of one seeded torchvision ResNet-50 to ONNX (opset 17), for
the tests of per-layer digests (docs/MODELS.md):

    base.onnx       scripts/export_model.py's resnet50 (seed 0)
    renamed.onnx    the same weights, exported again inside a wrapper module
                    with other input and output names: every tensor, node and
                    initializer name differs, nothing that computes does
    layer4fc.onnx   base with other weights in layer4 and fc only
    bn-layer2.onnx  base with other BatchNorm running statistics in layer2 only

    /usr/bin/python3 scripts/export_versions.py --out DIR
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_model import build  # noqa: E402


def export(model: torch.nn.Module, path: str, inp: str = "input", out: str = "output") -> None:
    dummy = torch.randn(1, 3, 224, 224)
    tmp = path + ".tmp"
    torch.onnx.export(
        model, dummy, tmp,
        opset_version=17,
        input_names=[inp], output_names=[out],
        dynamic_axes={inp: {0: "batch"}, out: {0: "batch"}},
        do_constant_folding=True,
    )
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    export(build("resnet50", 0), os.path.join(args.out, "base.onnx"))
    export(torch.nn.Sequential(build("resnet50", 0)).eval(), os.path.join(args.out, "renamed.onnx"), "images", "logits")

    m = build("resnet50", 0)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for mod in (m.layer4, m.fc):
            for p in mod.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.01)
    export(m, os.path.join(args.out, "layer4fc.onnx"))

    m = build("resnet50", 0)
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for mod in m.layer2.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.add_(torch.randn(mod.num_features, generator=g) * 0.01)
                mod.running_var.mul_(1.1)
    export(m, os.path.join(args.out, "bn-layer2.onnx"))
    print(f"exported 4 versions of resnet50 to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
