"""Train a small CNN on images decoded in the training process: perfledger's example.

    perfledger record -o prof_example -- python examples/train_cnn.py --epochs 1
    perfledger record -o prof_fixed -- python examples/train_cnn.py --epochs 1 --preprocessed

Each sample is stored "encoded" (a small seed tensor) and decoded on demand: upsampled to
``--raw-size`` pixels, blurred and resized down to 32x32, as an image pipeline decodes and
resizes a JPEG. With the default ``--workers 0`` that work runs in the training process, inside
every step, and takes about half of it: the bottleneck ``perfledger record`` names
(``dataloader_bound``). ``--preprocessed`` decodes the whole dataset once before training (a
cached, pre-processed dataset) so that a step only stacks ready tensors; ``--workers N`` moves
the decoding into N DataLoader worker processes instead (a gain only where cores are free).

The model, the batches and the number of steps do not depend on either flag: the runs are the
same workload. The step time itself is left to perfledger (every step is timed, profiled or
not); the program prints its loss. Runs on a CUDA device when one is present.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

IMAGE_SIZE = 32
CLASSES = 10


class SyntheticImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Deterministic random 3x32x32 images in 10 classes; each sample is made on demand."""

    def __init__(self, size: int, image_size: int = IMAGE_SIZE, seed: int = 0) -> None:
        self.size = size
        self.image_size = image_size
        self.seed = seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(0, CLASSES, (1,), generator=generator))
        image = torch.randn(3, self.image_size, self.image_size, generator=generator)
        # A class-dependent pattern, so that the loss actually goes down.
        image[label % 3, :, : self.image_size // (1 + label // 3)] += 1.0
        if index % 2:
            image = image.flip(-1)
        return image, torch.tensor(label)


def _blur_kernel() -> torch.Tensor:
    """A 5x5 binomial (Gaussian-like) blur for each of the 3 channels."""
    taps = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
    kernel = taps[:, None] * taps[None, :]
    return (kernel / kernel.sum()).expand(3, 1, 5, 5).contiguous()


class EncodedImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Images stored small and decoded on every access: upsample, blur, resize, normalise.

    ``preprocessed=True`` decodes every image once, here, and ``__getitem__`` then returns the
    stored result: the same samples, without the per-step work.
    """

    def __init__(
        self, size: int, raw_size: int = 192, seed: int = 0, preprocessed: bool = False
    ) -> None:
        self.size = size
        self.raw_size = raw_size
        self.seed = seed
        self.blur = _blur_kernel()
        self.decoded: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        if preprocessed:
            self.decoded = [self.decode(index) for index in range(size)]

    def __len__(self) -> int:
        return self.size

    def decode(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The sample ``index``: a 3x32x32 image and its label."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(0, CLASSES, (1,), generator=generator))
        encoded = torch.randn(1, 3, self.raw_size // 8, self.raw_size // 8, generator=generator)
        # A class-dependent pattern, so that the loss actually goes down.
        encoded[0, label % 3, :, : encoded.shape[-1] // (1 + label // 3)] += 1.5
        image = F.interpolate(encoded, size=(self.raw_size,) * 2, mode="bicubic")
        image = F.conv2d(image, self.blur, padding=2, groups=3)
        image = F.interpolate(image, size=(IMAGE_SIZE,) * 2, mode="bilinear", antialias=True)
        image = (image[0] - image.mean()) / image.std()
        return image, torch.tensor(label)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self.decoded[index] if self.decoded is not None else self.decode(index)
        if index % 2:  # a cheap augmentation, done per access in both modes
            image = image.flip(-1)
        return image, label


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
        nn.Linear(4 * width, CLASSES),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--width", type=int, default=16, help="channels of the first conv")
    parser.add_argument(
        "--raw-size", type=int, default=192, help="pixels of a decoded image before its resize"
    )
    parser.add_argument(
        "--preprocessed",
        action="store_true",
        help="decode the dataset once before training instead of in every step (the fix)",
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="DataLoader worker processes (0: decode in-process)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads (1 keeps step times steady on a shared machine; 0: torch's default)",
    )
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    dataset = EncodedImages(
        args.batch_size * args.steps_per_epoch,
        raw_size=args.raw_size,
        seed=args.seed,
        preprocessed=args.preprocessed,
    )
    if args.preprocessed:
        print(f"decoded {len(dataset)} images in {time.perf_counter() - started:.1f} s", flush=True)
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
        epoch_started = time.perf_counter()
        total_loss = 0.0
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        print(
            f"epoch {epoch}: training loss {total_loss / len(loader):.4f} "
            f"({len(loader)} steps in {time.perf_counter() - epoch_started:.1f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
