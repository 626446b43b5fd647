"""Many seeds of one small model in one vectorised call (claims need >= 5 seeds per map point).

A claim's ``runs`` function (``docs/claims.md``) trains every seed of a map point at once and
returns one trajectory with a leading ``seed`` dim. To give *the same numbers* as the per-seed
:class:`~empirical.trainer.Trainer` runs (so a batched engine can be tested equal to the plain
one), draw every random number through :class:`SeedBatch` and build the initial parameters with
:func:`stacked_modules`:

* the Trainer seeds ``torch.manual_seed(seed)`` (parameter initialisation) and hands the
  experiment ``torch.Generator(device).manual_seed(seed)`` (data, minibatches);
* :class:`SeedBatch` holds one such generator per seed; ``draw(fn)`` stacks ``fn(generator)``
  over seeds, so row ``i`` of every draw is what seed ``seeds[i]``'s run draws with the same
  sequence of calls. Drawing is a short Python loop over seeds; the model's arithmetic — the
  cost — runs batched (a leading seed dim, or :func:`torch.func.vmap` over stacked parameters);
* :func:`stacked_modules` builds the module once per seed under ``torch.manual_seed(seed)`` and
  stacks the parameters (:func:`torch.func.stack_module_state`) for ``vmap`` with
  :func:`torch.func.functional_call`.

``tests/tiny/empirical/experiment.py:train_seeds`` is the worked example (tested equal to the Trainer's runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["SeedBatch", "stacked_modules"]


class SeedBatch:
    """The random streams of ``seeds`` on ``device``, drawn together (see the module docstring).

    >>> rng = SeedBatch([0, 1, 2])
    >>> rng.rand(4, dtype=torch.float64).shape   # row i == torch.rand(4, generator=<seed i>)
    torch.Size([3, 4])
    """

    def __init__(self, seeds: Sequence[int], device: str | torch.device = "cpu"):
        self.seeds = tuple(int(s) for s in seeds)
        if not self.seeds:
            raise ValueError("SeedBatch needs at least one seed")
        self.device = torch.device(device)
        self.generators = [torch.Generator(device=self.device).manual_seed(s) for s in self.seeds]

    def __len__(self) -> int:
        return len(self.seeds)

    def draw(self, fn: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
        """``stack([fn(g) for g in generators])``: shape ``(len(seeds), *fn's shape)``."""
        return torch.stack([fn(g) for g in self.generators])

    def rand(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.draw(lambda g: torch.rand(*shape, generator=g, dtype=dtype, device=self.device))

    def randn(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.draw(lambda g: torch.randn(*shape, generator=g, dtype=dtype, device=self.device))

    def randint(self, low: int, high: int, shape: Sequence[int]) -> torch.Tensor:
        return self.draw(lambda g: torch.randint(low, high, tuple(shape), generator=g, device=self.device))

    def state(self) -> list[torch.Tensor]:
        """Every generator's state (for a checkpoint); :meth:`set_state` restores it."""
        return [g.get_state() for g in self.generators]

    def set_state(self, states: Sequence[torch.Tensor]) -> None:
        if len(states) != len(self.generators):
            raise ValueError(f"{len(states)} generator states for {len(self.generators)} seeds")
        for g, s in zip(self.generators, states):
            g.set_state(s)


def stacked_modules(seeds: Sequence[int], build: Callable[[], torch.nn.Module]
                    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.nn.Module]:
    """``(params, buffers, base)``: ``build()`` called under ``torch.manual_seed(seed)`` for each
    seed (as the Trainer seeds a run), parameters and buffers stacked along a leading seed dim;
    ``base`` (on the meta device) for ``torch.func.functional_call(base, (p, b), x)`` under
    ``torch.func.vmap``. The global RNG state is restored afterwards."""
    state = torch.get_rng_state()
    try:
        models: list[Any] = []
        for s in seeds:
            torch.manual_seed(int(s))
            models.append(build())
        base = build().to("meta")
    finally:
        torch.set_rng_state(state)
    params, buffers = torch.func.stack_module_state(models)
    return params, buffers, base
