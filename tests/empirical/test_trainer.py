"""empirical/trainer.py: the Trainer reads time from the config (steps, log_steps(), ode_time), seeds
every draw, records the config once, stops at divergence with the partial trajectory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from empirical.trainer import ModuleState, Trainer, resolve_device, stack_runs
from simulate.trajectory import config_of, parameter_values_of
from theory.errors import ConfigError, DivergenceError
from theory.params import ParamsBase


@dataclass(frozen=True)
class Cfg(ParamsBase):
    """Noisy gradient descent on (w - 1)^2 / 2; time unit: lr * step."""

    lr: float = 0.1
    noise: float = 0.1
    steps: int = 10
    log_every: int = 4
    seed: int = 0
    blow_up_at: int = -1

    def ode_time(self, step):
        return self.lr * step


class Quadratic(ModuleState):
    paper, name = "test", "quadratic"

    def __init__(self, config: Cfg):
        self.config = config

    def setup(self, device, generator):
        self.gen = generator
        self.model = torch.nn.Linear(1, 1, bias=False, dtype=torch.float64).to(device)
        torch.nn.init.zeros_(self.model.weight)

    def step(self, step):
        w = self.model.weight
        noise = self.config.noise * torch.randn((), generator=self.gen, dtype=torch.float64)
        with torch.no_grad():
            w -= self.config.lr * (w - 1.0 + noise)
        loss = float((w.detach() - 1.0) ** 2 / 2)
        return {"loss": float("nan") if step == self.config.blow_up_at else loss}

    def observables(self):
        return {"w": float(self.model.weight.detach())}

    def parameters_info(self):
        return {"curvature": 1.0}


def test_logs_at_the_configs_steps_with_the_configs_times():
    cfg = Cfg()
    tr = Trainer(device="cpu").run(Quadratic(cfg))
    np.testing.assert_array_equal(tr["step"].values, [0, 4, 8, 10])
    np.testing.assert_array_equal(tr["time"].values, cfg.ode_times())
    assert tr["w"].values[0] == 0.0 and "minibatch_loss" in tr  # step scalars logged with a prefix
    # the noiseless run is the closed form w_k = 1 - (1 - lr)^k
    exact = Trainer(device="cpu").run(Quadratic(Cfg(noise=0.0)))
    np.testing.assert_allclose(exact["w"].values, 1 - 0.9 ** np.array([0, 4, 8, 10]), rtol=1e-14)


def test_seeds_and_provenance():
    a = Trainer(device="cpu").run(Quadratic(Cfg(seed=3)))
    b = Trainer(device="cpu").run(Quadratic(Cfg(seed=3)))
    c = Trainer(device="cpu", seed=4).run(Quadratic(Cfg(seed=3)))  # Trainer(seed=) overrides config.seed
    np.testing.assert_array_equal(a["w"].values, b["w"].values)
    assert not np.array_equal(a["w"].values, c["w"].values)
    assert (a.attrs["seed"], c.attrs["seed"]) == (3, 4)
    assert config_of(a) == Cfg(seed=3).to_dict() and a.attrs["source"] == "train"  # the config, once
    assert parameter_values_of(a) == {"curvature": 1.0}  # derived quantities only
    runs = stack_runs([a, c])
    assert runs["w"].dims == ("run", "time") and runs.sizes["run"] == 2


def test_divergence_keeps_the_partial_trajectory():
    with pytest.raises(DivergenceError) as info:
        Trainer(device="cpu").run(Quadratic(Cfg(blow_up_at=5)))
    err = info.value
    assert err.step == 6 and "non-finite loss" in err.one_line()
    np.testing.assert_array_equal(err.partial["step"].values, [0, 4])
    assert err.partial.attrs["status"] == -1


def test_stop_when_ends_at_a_logging_point():
    tr = Trainer(device="cpu").run(Quadratic(Cfg(noise=0.0)), stop_when=lambda obs: obs["w"] > 0.3)
    np.testing.assert_array_equal(tr["step"].values, [0, 4])  # w_4 = 1 - 0.9^4 = 0.34


def test_device_choices():
    assert resolve_device("cpu").type == "cpu"
    with pytest.raises(ConfigError, match="^device: must be auto, cpu or cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="^device: cuda requested"):
            resolve_device("cuda")


def test_a_signal_the_process_was_started_with_ignored_stays_ignored_while_training():
    """``nohup`` / a background job: an ignored SIGINT or SIGTERM stays ignored inside the training
    loop's deferral (a default one is noted there, and restored after the block)."""
    import os
    import signal

    from empirical.trainer import _deferred_signals

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with _deferred_signals() as caught:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)  # ignored
            os.kill(os.getpid(), signal.SIGTERM)  # noted
            for _ in range(100):  # the handler runs between bytecodes of the main thread
                if caught:
                    break
        assert caught == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
