"""Three DDP steps on a small model, wrapped as a correct script would, and checksums of the
parameters and gradients compared across ranks."""

from __future__ import annotations

from typing import Any

STEPS = 3
SAMPLES = 64
BATCH = 8


def run_ddp_steps(torch: Any, rank: int, world: int, device: Any) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    torch.manual_seed(0)  # same initial weights everywhere; DDP broadcasts rank 0's anyway
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model.to(device)
    ids = (
        dict(device_ids=[device.index], output_device=device.index) if device.type == "cuda" else {}
    )
    ddp = DistributedDataParallel(model, **ids)
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(
        torch.randn(SAMPLES, 32, generator=generator), torch.randn(SAMPLES, 4, generator=generator)
    )
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    steps = 0
    for epoch in range(STEPS):
        sampler.set_epoch(epoch)
        inputs, targets = next(iter(loader))
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(inputs.to(device)), targets.to(device))
        loss.backward()
        optimizer.step()
        steps += 1
    return {"steps": steps, **_compare_across_ranks(torch, model)}


def _compare_across_ranks(torch: Any, model: Any) -> dict[str, Any]:
    """Each rank's sums of parameters and gradients; MIN and MAX over ranks must agree."""
    params = torch.stack([p.detach().double().sum() for p in model.parameters()])
    grads = torch.stack([p.grad.detach().double().sum() for p in model.parameters()])
    mine = torch.stack([params.sum(), grads.sum()])
    low, high = mine.clone(), mine.clone()
    torch.distributed.all_reduce(low, op=torch.distributed.ReduceOp.MIN)
    torch.distributed.all_reduce(high, op=torch.distributed.ReduceOp.MAX)
    spread = (high - low).abs().cpu().tolist()
    scale = max(1e-12, float(mine.abs().max()))
    return {
        "param_checksum": float(mine[0]),
        "grad_checksum": float(mine[1]),
        "param_spread": spread[0],
        "grad_spread": spread[1],
        "in_sync": spread[0] <= 1e-6 * scale and spread[1] <= 1e-6 * scale,
    }
