"""A tiny PyTorch program for the recorder's tests: every way a step can be made or broken.

Modes: ``train`` (DataLoader + SGD), ``infer`` (DataLoader, no optimizer), ``mark`` (a plain
loop with perfledger.mark_step()), ``ddp`` (gloo data parallel under torchrun). Faults:
``--raise-at K`` raises in step K, ``--hang-at K`` stops in step K until killed,
``--kill-rank R --kill-at K`` kills rank R with SIGKILL in step K, ``--exit-at K`` leaves by
``os._exit(3)`` in step K (no exit handler runs). ``--announce`` prints
``STEP k`` as each step begins, for tests that must act at a given step.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("train", "infer", "mark", "ddp"), default="train")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--work", type=int, default=4, help="matmuls per step, to lengthen it")
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument("--hang-at", type=int, default=-1)
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--exit-at", type=int, default=-1)
    parser.add_argument("--announce", action="store_true")
    args = parser.parse_args()

    rank = 0
    if args.mode == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4)
    )
    if args.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    dataset = TensorDataset(
        torch.randn(args.batches * args.batch_size, 64),
        torch.randint(0, 4, (args.batches * args.batch_size,)),
    )
    loader = DataLoader(dataset, batch_size=args.batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    square = torch.randn(96, 96)

    def work() -> None:
        product = square
        for _ in range(args.work):
            product = torch.tanh(product @ square)

    def begin(step: int) -> None:
        if args.announce:
            print(f"STEP {step}", flush=True)
        if step == args.raise_at:
            raise RuntimeError(f"failure in step {step}")
        if step == args.kill_at and rank == args.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == args.exit_at:
            os._exit(3)
        if step == args.hang_at:
            while True:
                time.sleep(0.05)

    if args.mode == "mark":
        import perfledger

        for step in range(args.batches):
            begin(step)
            work()
            perfledger.mark_step()
    elif args.mode == "infer":
        with torch.no_grad():
            for step, (x, _) in enumerate(loader):
                begin(step)
                work()
                model(x)
    else:
        for step, (x, y) in enumerate(loader):
            begin(step)
            work()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if args.mode == "ddp":
        # leaving the gloo group to the interpreter's exit aborts it now and then
        # ("terminate called without an active exception")
        dist.barrier()
        dist.destroy_process_group()
    print(f"rank {rank} done", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
