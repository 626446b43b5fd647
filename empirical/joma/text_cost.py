"""What the paper's real-text protocol (docs/papers/joma.md §5 Figs. 6 and 8: 20 epochs, 6900 minibatches
per run, full vocabulary, every validation chunk at each checkpoint) costs: :func:`time_runs` times a
few minibatches and one full validation pass per depth on a device, :func:`protocol_cost`
extrapolates to the whole protocol (every depth and learning rate of
:meth:`empirical.joma.text.JomaTextConfig.full`, every seed). Run as a module to measure:

    python -m empirical.joma.text_cost --device cuda --steps 200 --out cost.json
"""

from __future__ import annotations

import argparse
import json
import time

from .text import JomaTextConfig

__all__ = ["time_runs", "protocol_cost"]


def time_runs(layers=(1, 2, 5, 10), *, steps: int = 20, device: str = "cpu", threads: int | None = None,
              corpus: str = "") -> dict:
    """Per depth ``L``: seconds per training minibatch and per full validation pass of the full
    protocol's run (:meth:`JomaTextConfig.full`, 5-layer learning rate 1e-4), measured on ``device``
    (``threads`` torch CPU threads: 1 gives core-seconds). Wall seconds of ``steps`` minibatches
    minus one evaluation, each run logging at steps 0 and ``steps``."""
    import torch

    from ..textrun import train_text

    if threads:
        torch.set_num_threads(int(threads))
    from ..textrun import corpus_for

    full = JomaTextConfig.full(corpus=corpus)
    corpus_for(full.run())  # tokenise once before timing (cached)
    cpu = not device.startswith("cuda")
    clock = time.process_time if cpu else time.perf_counter  # CPU: core-seconds, robust to a shared machine
    out = {}
    for L in layers:
        row = {}
        for n in (1, int(steps)):  # two runs: the difference isolates the per-minibatch cost
            for chunks in ((1,) if cpu else (1, 0)):
                cfg = full.run(n_layer=int(L), lr=full.lr, seed=1, steps=n, log_every=n, eval_chunks=chunks)
                if not cpu:
                    torch.cuda.synchronize()
                t0 = clock()
                train_text(cfg, device=device)
                if not cpu:
                    torch.cuda.synchronize()
                row[(n, chunks)] = clock() - t0
        per_step = (row[(int(steps), 1)] - row[(1, 1)]) / (int(steps) - 1)
        if cpu:  # a validation pass = 620 chunks of 10 x 35 tokens, forward only: ~1/6 of a minibatch each
            per_eval = per_step / 6 * 620
        else:
            per_eval = max((row[(1, 0)] - row[(1, 1)]) / 2, 0.0)
        out[int(L)] = {"per_minibatch_s": per_step, "per_eval_s": per_eval}
    return out


def protocol_cost(rates: dict) -> dict:
    """Seconds of :meth:`JomaTextConfig.full` (every (depth, lr) run, every seed) at ``rates``
    (:func:`time_runs`' output; depths missing from it are interpolated linearly in L)."""
    import numpy as np

    full = JomaTextConfig.full()
    Ls = sorted(int(k) for k in rates)
    step = lambda L: float(np.interp(L, Ls, [rates[k]["per_minibatch_s"] for k in Ls]))  # noqa: E731
    ev = lambda L: float(np.interp(L, Ls, [rates[k]["per_eval_s"] for k in Ls]))  # noqa: E731
    pairs = list(dict.fromkeys([(L, full.lr) for L in full.layers] + [(full.sweep_layers, lr) for lr in full.sweep_lrs]))
    evals = full.steps // full.log_every + 1
    per_seed = sum(full.steps * step(L) + evals * ev(L) for L, _ in pairs)
    return {"runs": len(pairs) * len(full.seeds), "seeds": len(full.seeds), "minibatches": full.steps,
            "seconds": per_seed * len(full.seeds)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--layers", default="1,2,5,10")
    p.add_argument("--corpus", default="")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    rates = time_runs(tuple(int(x) for x in a.layers.split(",")), steps=a.steps, device=a.device,
                      threads=a.threads, corpus=a.corpus)
    res = {"device": a.device, "steps": a.steps, "threads": a.threads, "rates": rates, "protocol": protocol_cost(rates)}
    if a.device.startswith("cuda"):
        import torch

        res["gpu"] = torch.cuda.get_device_name(0)
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
