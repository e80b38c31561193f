#!/usr/bin/python3
"""PyTorch eager baseline for scripts/bench-extract.sh.

    /usr/bin/python3 scripts/bench_torch_extract.py --images DIR [--threads N]
        [--workers 2] [--batch 16] [--layers layer12,layer18]

torchvision ResNet-50 (scripts/export_model.py's build(), same seed as the
ONNX file) truncated at featurefs's layer12 (layer3[3]) and layer18
(avgpool + flatten), fed by a DataLoader whose workers decode with PIL and
apply Resize(256)/CenterCrop(224)/ToTensor/Normalize. Prints JSON: per layer
images/s, seconds, and the seconds the main process waited for data vs ran
the model. scripts/bench_epoch.py's baseline uses the same TF and truncated().
"""
import argparse
import glob
import json
import os
import sys
import time

import torch
from PIL import Image
from torchvision import transforms

from export_model import build

TF = transforms.Compose([
    transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])


class Images(torch.utils.data.Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with Image.open(self.paths[i]) as im:
            return TF(im.convert("RGB"))


def truncated(model, layer):
    m = model
    if layer == "layer12":
        return torch.nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3[:4]).eval()
    if layer == "layer18":
        return torch.nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3, m.layer4,
                                   m.avgpool, torch.nn.Flatten(1)).eval()
    raise SystemExit(f"unknown layer {layer}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--layers", default="layer12,layer18")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    paths = sorted(glob.glob(os.path.join(args.images, "*.jpg")))
    model = build("resnet50", 0)
    out = []
    for layer in args.layers.split(","):
        net = truncated(model, layer)
        dl = torch.utils.data.DataLoader(Images(paths), batch_size=args.batch, num_workers=args.workers)
        with torch.no_grad():
            net(TF(Image.open(paths[0]).convert("RGB")).unsqueeze(0))  # warm-up
            wait = infer = 0.0
            t0 = time.perf_counter()
            t = t0
            n = 0
            for x in dl:
                t1 = time.perf_counter()
                wait += t1 - t
                net(x)
                t = time.perf_counter()
                infer += t - t1
                n += x.shape[0]
            secs = time.perf_counter() - t0
        out.append({"layer": layer, "images": n, "seconds": secs, "images_per_s": n / secs,
                    "wait_seconds": wait, "infer_seconds": infer})
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
