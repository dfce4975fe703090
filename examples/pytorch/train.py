"""A data-parallel PyTorch training script that keeps its state through Peregrine's recoveries.

Run it under Peregrine (examples/pytorch/local.yaml, examples/pytorch/kubernetes.yaml) or on
its own: the agent provides torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, ...); without an agent, `peregrine.checkpoint` keeps nothing and the script
runs from scratch as a single process (WORLD_SIZE defaults to 1).

Every rank trains the same MLP on its own slice of a synthetic regression set (drawn from
a seeded generator, so every run sees the same data). Gradients are averaged with one
fixed-layout all-reduce over a flat buffer (the default), or with DistributedDataParallel
(--ddp), whose gradient buckets are rebuilt after the first iteration of each process, so
a resumed DDP run sums in a different order than an uninterrupted one.

Gradient accumulation (--micro-batches K): a step is a global sequence of WORLD_SIZE*K
micro-batches of batch/K samples (micro-batch g holds the samples rank g//K would read as
its (g%K)-th); each rank runs the share `peregrine.microbatches(step, rank, K)` gives it, K
of them from rank*K unless Peregrine's controller has set a micro-batch plan (fail-slow
mitigation: a slow rank gets fewer), and scales each micro-batch's loss by the share's
gradient_scale, so the averaged gradients are the same update either way. The progress
line carries mb=<count> (how the agent knows this script follows plans) and, as loss, this
rank's gradient_scale-weighted sum of its micro-batch losses (the batch mean when K=1).

The state saved every `peregrine.checkpoint.interval()` steps (--checkpoint-every
overrides it) is everything the next step depends on: the model, the optimizer (SGD with
momentum), the RNG states and the data position. On start the script loads the newest
checkpoint Peregrine restored for it (`peregrine.checkpoint.load()`), so a restarted rank
continues with the same weights and data as if nothing had happened.

At the end each rank prints one line with a SHA-256 over every parameter tensor:
  [peregrine] final step=<n> param_digest=<hex>
For checking a recovery: --print-state-digests prints a SHA-256 over the whole state each
time one is saved and once one is loaded,
  [train] rank=<r> saved step=<n> state_digest=<hex>
  [train] rank=<r> loaded step=<n> state_digest=<hex>
(equal digests for the same rank and step: the restored state is bit-identical to the
saved one), and --params-out PATH writes the final parameters as raw float32 values in
the model's state_dict order ("{rank}" in PATH is replaced by the rank).
"""

import argparse
import contextlib
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist

import peregrine


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--hidden", type=int, default=256, help="width of the hidden layers")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--micro-batches", type=int, default=1,
                   help="micro-batches per rank per step (gradient accumulation; divides --batch)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ddp", action="store_true", help="average gradients with DistributedDataParallel")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="steps between checkpoints (default: spec.checkpoint.intervalSteps)")
    p.add_argument("--step-sleep-ms", type=float, default=0, help="extra time per step (to pace a demo)")
    p.add_argument("--print-state-digests", action="store_true",
                   help="print a SHA-256 of each saved and of the loaded state")
    p.add_argument("--params-out", default="",
                   help="write the final parameters as raw float32 to this path ({rank}: the rank)")
    return p.parse_args()


def build_model(args):
    torch.manual_seed(args.seed)
    layers = []
    width = 32
    for _ in range(args.layers):
        layers += [torch.nn.Linear(width, args.hidden), torch.nn.Tanh()]
        width = args.hidden
    layers.append(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(*layers)


def batch_at(position, rank, batch, seed):
    """The (inputs, targets) of one rank at one data position: the same for every run."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + position * 4099 + rank)
    x = torch.randn(batch, 32, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * torch.randn(batch, 1, generator=g)
    return x, y


def micro_batch(position, g, args):
    """Global micro-batch g of the step at `position`: part g%K of rank g//K's batch."""
    k = args.micro_batches
    size = args.batch // k
    x, y = batch_at(position, g // k, args.batch, args.seed)
    m = g % k
    return x[m * size:(m + 1) * size], y[m * size:(m + 1) * size]


def average_gradients_flat(model, world):
    """One all-reduce over all gradients in a fixed order and layout."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def param_digest(model):
    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def state_digest(state):
    """SHA-256 over a checkpoint state: its structure, every tensor's dtype, shape and bytes, and
    every other value's repr, in container order (what a bit-identical restore keeps)."""
    h = hashlib.sha256()

    def walk(obj):
        if isinstance(obj, torch.Tensor):
            t = obj.detach().contiguous().cpu()
            h.update(f"tensor {t.dtype} {tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(obj, dict):
            h.update(f"{type(obj).__name__} {len(obj)}".encode())
            for key, value in obj.items():
                h.update(repr(key).encode())
                walk(value)
        elif isinstance(obj, (list, tuple)):
            h.update(f"{type(obj).__name__} {len(obj)}".encode())
            for value in obj:
                walk(value)
        else:
            h.update(repr(obj).encode())

    walk(state)
    return h.hexdigest()


def write_params(model, path, rank):
    with open(path.replace("{rank}", str(rank)), "wb") as out:
        for p in model.state_dict().values():
            out.write(p.detach().to(torch.float32).contiguous().numpy().tobytes())


def main():
    args = parse_args()
    if args.micro_batches < 1 or args.batch % args.micro_batches != 0:
        sys.exit("--micro-batches must be >= 1 and divide --batch")
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed = world > 1
    if distributed:
        dist.init_process_group("gloo", rank=rank, world_size=world)

    model = build_model(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    train_model = torch.nn.parallel.DistributedDataParallel(model) if (distributed and args.ddp) else model

    step, position = 0, 0
    restored_step, state = peregrine.checkpoint.load()
    if state is not None:
        if args.print_state_digests:
            print(f"[train] rank={rank} loaded step={restored_step} state_digest={state_digest(state)}", flush=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        position = state["data_position"]
        step = restored_step
        print(f"[rank {rank}] resumed from checkpoint step {step}", flush=True)

    every = args.checkpoint_every or peregrine.checkpoint.interval()
    loss_fn = torch.nn.MSELoss()
    while step < args.steps:
        started = time.perf_counter()
        # Data parallelism only: the rank is its data-parallel replica.
        share = peregrine.microbatches(step + 1, rank, args.micro_batches)
        optimizer.zero_grad()
        loss = 0.0
        for i in range(share.count):
            x, y = micro_batch(position, share.first + i, args)
            sync = not (distributed and args.ddp) or i == share.count - 1
            with train_model.no_sync() if not sync else contextlib.nullcontext():
                part = loss_fn(train_model(x), y) * share.gradient_scale
                part.backward()
            loss += part.item()
        if distributed and not args.ddp:
            average_gradients_flat(model, world)
        optimizer.step()
        step += 1
        position += 1
        if args.step_sleep_ms > 0:
            time.sleep(args.step_sleep_ms / 1000)
        saved_ms = 0.0
        if every > 0 and step % every == 0:
            t = time.perf_counter()
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state(),
                "data_position": position,
            }
            saved = peregrine.checkpoint.save(step, state)
            saved_ms = (time.perf_counter() - t) * 1000
            if saved and args.print_state_digests:
                print(f"[train] rank={rank} saved step={step} state_digest={state_digest(state)}", flush=True)
        iter_ms = (time.perf_counter() - started) * 1000
        peregrine.step(step, loss=loss, iter_ms=iter_ms, checkpoint_ms=saved_ms, mb=share.count)

    if args.params_out:
        write_params(model, args.params_out, rank)
    print(f"[peregrine] final step={step} param_digest={param_digest(model)}", flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
