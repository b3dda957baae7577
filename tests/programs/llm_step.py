"""A small decoder-only transformer trained on random tokens: the LLM-like recordings of
tests/data/kineto/h200 (tests/data/record_cuda.sh).

    python tests/programs/llm_step.py [--steps N] [--graphs | --compile]

bf16 autocast, causal scaled-dot-product attention, AdamW. ``--graphs`` captures the whole
step (forward, backward and the optimizer) in one CUDA graph and replays it each step;
``--compile`` runs the model through ``torch.compile`` (Triton kernels). Steps are marked
with ``perfledger.mark_step()`` from the start (a no-op when nothing records): a replayed graph
calls no optimizer step of its own, and the warm-up and capture belong to step 0. Without a
CUDA device it runs eagerly, small.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

try:
    from perfledger import mark_step
except ImportError:  # run without perfledger installed

    def mark_step() -> None:
        pass


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--graphs", action="store_true", help="replay the step as a CUDA graph")
    mode.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    vocab, width, heads, layers, batch, seq = (
        (8192, 1024, 16, 4, 8, 1024) if cuda else (512, 64, 4, 2, 2, 64)
    )
    torch.manual_seed(0)
    model = Decoder(vocab, width, heads, layers).to(device)
    graphs = args.graphs and cuda
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=graphs)
    forward = torch.compile(model) if args.compile else model
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=not graphs)
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=not graphs):
            logits = forward(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    mark_step()  # step 0: the warm-up (and the capture)
    graph = None
    if graphs:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step()
    started = time.perf_counter()
    for _ in range(args.steps):
        mark_step()
        tokens.copy_(torch.randint(0, vocab, tokens.shape, device=device))
        if graph is not None:
            graph.replay()
            loss = static_loss
        else:
            loss = step()
    mark_step()
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    print(f"{args.steps} steps, {1000 * elapsed / args.steps:.1f} ms/step, loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
