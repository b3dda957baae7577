"""Data-parallel training of the example CNN, one process per rank (gloo on CPU, NCCL on GPUs).

    perfledger record -- torchrun --nproc-per-node 2 examples/train_ddp.py --epochs 1

perfledger writes one trace per rank and analyses them together.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_cnn import SyntheticImages, small_cnn  # noqa: E402 - the sibling example


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        device = torch.device("cpu")
    torch.manual_seed(0)
    dataset = SyntheticImages(args.batch_size * args.steps_per_epoch * world)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(
        small_cnn(args.width).to(device), device_ids=[device.index] if cuda else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        started = time.perf_counter()
        for images, labels in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
        if rank == 0:
            elapsed = time.perf_counter() - started
            print(f"epoch {epoch}: {1000 * elapsed / len(loader):.0f} ms/step", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
