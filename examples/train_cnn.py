"""Train a small CNN on synthetic images: the example ``perfledger record`` profiles.

    perfledger record -- python examples/train_cnn.py --epochs 1

A few hundred milliseconds per step on a laptop CPU, with a DataLoader that does real work per
sample (decode-like noise generation and a flip), so that the step table shows data loading,
forward, backward and optimizer time. Runs on a CUDA device when one is present.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Deterministic random 3x32x32 images in 10 classes; each sample is made on demand."""

    def __init__(self, size: int, image_size: int = 32, seed: int = 0) -> None:
        self.size = size
        self.image_size = image_size
        self.seed = seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(0, 10, (1,), generator=generator))
        image = torch.randn(3, self.image_size, self.image_size, generator=generator)
        # A class-dependent pattern, so that the loss actually goes down.
        image[label % 3, :, : self.image_size // (1 + label // 3)] += 1.0
        if index % 2:
            image = image.flip(-1)
        return image, torch.tensor(label)


def small_cnn(width: int = 32) -> nn.Module:
    """Three conv blocks and a linear classifier."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 4 * width, 3, padding=1),
        nn.BatchNorm2d(4 * width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps-per-epoch", type=int, default=30)
    parser.add_argument("--width", type=int, default=32, help="channels of the first conv")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = SyntheticImages(args.batch_size * args.steps_per_epoch, seed=args.seed)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
    )
    model = small_cnn(args.width).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    model.train()
    for epoch in range(args.epochs):
        started = time.perf_counter()
        total_loss = 0.0
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        elapsed = time.perf_counter() - started
        print(
            f"epoch {epoch}: loss {total_loss / len(loader):.4f}, "
            f"{1000 * elapsed / len(loader):.0f} ms/step",
            flush=True,
        )


if __name__ == "__main__":
    main()
