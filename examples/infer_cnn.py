"""Batched inference of the example CNN: no optimizer, so steps are DataLoader batches.

perfledger record -- python examples/infer_cnn.py --batches 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_cnn import SyntheticImages, small_cnn  # noqa: E402 - the sibling example


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(
        SyntheticImages(args.batch_size * args.batches, seed=1),
        batch_size=args.batch_size,
        num_workers=args.workers,
    )
    model = small_cnn(args.width).to(device).eval()
    correct = 0
    started = time.perf_counter()
    with torch.inference_mode():
        for images, labels in loader:
            predictions = model(images.to(device)).argmax(dim=1).cpu()
            correct += int((predictions == labels).sum())
    elapsed = time.perf_counter() - started
    print(
        f"{len(loader)} batches, {1000 * elapsed / len(loader):.0f} ms/batch, "
        f"accuracy {correct / len(loader.dataset):.3f}",  # type: ignore[arg-type]
        flush=True,
    )


if __name__ == "__main__":
    main()
