#!/usr/bin/python3
"""Export a torchvision model with random weights to ONNX (opset 17).

No pretrained weights can be downloaded, so featurefs's tests and demo use
torchvision architectures with weights=None. BatchNorm running statistics and
affine parameters are randomized (seeded) so that BN is not an identity and
preprocessing errors show in the features.

    /usr/bin/python3 scripts/export_model.py --model resnet50 --out resnet50.onnx
"""
import argparse
import os
import sys

import torch
import torchvision


def build(name: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    ctor = getattr(torchvision.models, name)
    try:
        model = ctor(weights=None)
    except TypeError:  # older torchvision
        model = ctor(pretrained=False)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return model.eval()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50", help="torchvision.models constructor name")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=224, help="input side")
    ap.add_argument("--state-dict", help="also save the torch state_dict here")
    args = ap.parse_args()

    model = build(args.model, args.seed)
    dummy = torch.randn(1, 3, args.size, args.size)
    tmp = args.out + ".tmp"
    torch.onnx.export(
        model, dummy, tmp,
        opset_version=17,
        input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        do_constant_folding=True,
    )
    os.replace(tmp, args.out)
    if args.state_dict:
        torch.save(model.state_dict(), args.state_dict)
    print(f"exported {args.model} to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
