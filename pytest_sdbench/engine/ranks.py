"""The distributed seam: which rank this process is, and gathering a value from every rank
of a tensor-parallel engine (each rank runs its own engine core in-process under
vLLM's external_launcher). On a single-rank engine every function is trivial."""

from __future__ import annotations

from typing import Any


def _world():
    """vLLM's world group when torch.distributed is up with more than one rank, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    from vllm.distributed.parallel_state import get_world_group
    return get_world_group()


def rank() -> int:
    world = _world()
    return 0 if world is None else int(world.rank_in_group)


def world_size() -> int:
    world = _world()
    return 1 if world is None else int(world.world_size)


def gather_from_ranks(value: Any) -> list[Any]:
    """Every rank's value, by rank, on every rank (an all-gather over the CPU group, so no
    device synchronisation is added)."""
    world = _world()
    if world is None:
        return [value]
    import torch.distributed as dist
    out: list[Any] = [None] * world.world_size
    dist.all_gather_object(out, value, group=world.cpu_group)
    return out
