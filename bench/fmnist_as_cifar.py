#!/usr/bin/env python3
"""Fashion-MNIST written as CIFAR-10 and CIFAR-100 binary files, so the seed's CIFAR models
(zoo:alexnet-cifar, 3x32x32 -> 10; zoo:vgg16-cifar, 3x32x32 -> 100) train on real images on a
machine that has Debian's dataset-fashion-mnist but no CIFAR (seed 000's Table 3 there).

Each 28x28 grey image is padded by 2 pixels of 0 on every side to 32x32 and repeated in the
three colour planes; the label stays Fashion-MNIST's (0-9; in the CIFAR-100 files it is both
the coarse and the fine label, so a 100-way model sees 10 of its classes used). --train and
--test take the first N images of each split (Fashion-MNIST's files are already shuffled).
The output is read by `--data cifar10:DIR/cifar10` and `--data cifar100:DIR/cifar100`.

usage: bench/fmnist_as_cifar.py OUT_DIR [--train 60000] [--test 10000] [--source /usr/share/datasets/fashion-mnist]
"""
import argparse
import gzip
import os
import struct
import sys


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xff
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def find(source, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(source, name)):
            return os.path.join(source, name)
    sys.exit(f"fmnist_as_cifar: {stem}(.gz) not found in {source} (apt-get install dataset-fashion-mnist)")


def records(source, split, limit, label_bytes):
    (n, h, w), pixels = read_idx(find(source, f"{split}-images-idx3-ubyte"))
    (nl,), labels = read_idx(find(source, f"{split}-labels-idx1-ubyte"))
    if (h, w) != (28, 28) or nl != n:
        sys.exit(f"fmnist_as_cifar: {split}: expected 28x28 images with one label each, got {n}x{h}x{w} and {nl}")
    out = []
    zero_rows = bytes(32 * 2)
    for i in range(min(n, limit)):
        img = pixels[i * 784:(i + 1) * 784]
        plane = zero_rows + b"".join(b"\0\0" + img[r * 28:(r + 1) * 28] + b"\0\0" for r in range(28)) + zero_rows
        out.append(bytes([labels[i]] * label_bytes) + plane * 3)
    return out


def write(path, recs):
    with open(path + ".tmp", "wb") as f:
        f.write(b"".join(recs))
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=60000)
    ap.add_argument("--test", type=int, default=10000)
    ap.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    if args.train < 5 or args.test < 1:
        sys.exit("fmnist_as_cifar: --train needs at least 5 images (five CIFAR-10 batch files), --test at least 1")
    c10, c100 = os.path.join(args.out, "cifar10"), os.path.join(args.out, "cifar100")
    os.makedirs(c10, exist_ok=True)
    os.makedirs(c100, exist_ok=True)
    train = records(args.source, "train", args.train, 1)
    cut = [len(train) * k // 5 for k in range(6)]
    for k in range(5):
        write(os.path.join(c10, f"data_batch_{k + 1}.bin"), train[cut[k]:cut[k + 1]])
    write(os.path.join(c10, "test_batch.bin"), records(args.source, "t10k", args.test, 1))
    write(os.path.join(c100, "train.bin"), records(args.source, "train", args.train, 2))
    write(os.path.join(c100, "test.bin"), records(args.source, "t10k", args.test, 2))
    print(f"{len(train)} training and {min(args.test, 10000)} test images as {c10} and {c100}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
