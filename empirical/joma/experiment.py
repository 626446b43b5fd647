"""JoMA's experiments (docs/papers/joma.md §5, §3): each reads every setting from one
:class:`~theory.joma.JomaConfig` (``config.variant`` picks the experiment), trains with the
:class:`~empirical.trainer.Trainer` and logs the theory's observables under the theory's names.

* :class:`BlockExperiment` — the ``fixed`` variant (loss ``-mean_n sum_k G_nk h_nk``: the very
  objective the block ODE is derived from, so agreement is a *derivation check*) and the ``ce``
  variant (the official Figs. 2-3 toy: cross-entropy on the ``K`` class logits ``h``);
* :class:`MixtureExperiment` — the headline network (``mixture``): finite token sequences from
  Theorem 3's class mixture, softmax attention over the positions (the map the network computes and
  whose entropy is logged), tanh/ReLU MLP, cross-entropy; Assumption 1 is an approximation here;
* :class:`ProbeExperiment` — the converging one-token-per-class toy (``probe``): entropy drop and
  bounce (spec §2.5, §4 item 3);
* :class:`HBLTBlockExperiment` — the block on HBLT bags (``hblt``): learning order vs LCA height
  (spec §3.4);
* :class:`HierExperiment` — Table 1's multi-layer Transformer on the random-combination hierarchy
  (``hier``; Adam, float32: no ODE to match).

Every experiment trains with the paper's one update rule (:mod:`.update`: SGD with one learning
rate, Adam for ``hier``).

:func:`run` is the paper row's ``train`` slot (``tdyn train joma [--variant V]``); :func:`train`
returns the experiment too. Precision: float64 for the block experiments (compared with float64
ODEs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from theory.errors import ConfigError
from theory.joma import (FIG4_MU, PAPER, JomaConfig, entropy, initial_parameters, make_data, mixture_data,
                         normalised_correlation, softmax_zhat, stable_rank)

from ..trainer import ModuleState, Trainer
from . import update
from .data import RandomCombinationHierarchy, hblt_block_data
from .model import HierTransformer, JomaBlock

__all__ = ["run", "train", "experiment", "EXPERIMENTS", "BlockExperiment", "MixtureExperiment", "ProbeExperiment",
           "HBLTBlockExperiment", "HierExperiment"]


class _Trained(ModuleState):
    """Checkpoint state of a JoMA experiment: its module (``self.model``) and the state of the
    update rule (:mod:`.update`) it trains with."""

    def init_update(self) -> None:
        self.update_state = update.init([p.detach() for p in self.model.parameters()], config=self.config, xp=torch)

    def apply_update(self) -> None:
        """One step of the paper's update rule from the gradients of the last ``backward()``."""
        self.update_state = update.step_(self.model, self.update_state, self.config)

    def state_dict(self):
        return {**super().state_dict(), "update": self.update_state}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.update_state = state["update"]


@dataclass
class BlockExperiment(_Trained):
    """Full-batch SGD on the block; the top is ``config.variant``: ``fixed`` (stationary g,
    Assumption 1 exactly) or ``ce`` (cross-entropy on the class logits)."""

    config: JomaConfig
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        if self.config.variant not in ("fixed", "ce"):
            raise ConfigError("variant", f"the block top is 'fixed' or 'ce', got {self.config.variant!r}")
        self.top = self.config.variant
        self.name = f"block_{self.top}"
        self.X, self.G = make_data(self.config)

    def setup(self, device, generator):
        c = self.config
        W0, z0 = initial_parameters(c)
        self.model = JomaBlock(W0, z0, c.attention, c.activation, c.temperature, self.dtype).to(device)
        self.init_update()
        self.Xt = torch.as_tensor(self.X, dtype=self.dtype, device=device)
        self.Gt = torch.as_tensor(self.G, dtype=self.dtype, device=device)
        self.labels = torch.arange(c.N, device=device)
        self.xbar = self.X.mean(0)  # Decision 4: bbar ~ E[x]
        z, V, s = self.model.reduced()
        self._C = z - self._zhat_terms(V)[0]
        self._c_linear = z**2 - (V**2).sum(0)
        self._z0 = z
        self._bbar_integral = np.zeros(c.Mc)
        if c.attention == "softmax":
            self._C_alt = {k: z - v for k, v in self._zhat_alternatives(V).items()}

    def loss(self) -> torch.Tensor:
        h = self.model(self.Xt)
        if self.top == "fixed":
            return -(self.Gt * h).sum(1).mean()  # -dL/dh_nk = G_nk / N: Assumption 1 exactly
        return nn.functional.cross_entropy(h, self.labels)

    def step(self, step: int) -> dict[str, float]:
        track = self.config.attention == "softmax"
        if track:
            eb0, n0 = self._mean_b_and_norm()
        loss = self.loss()
        loss.backward()
        self.apply_update()  # SGD, equal learning rates on W and z
        if track:  # int E[b](t) d(sum_k |v_k|^2)/(2T), trapezoid per step (Decision 4, time-varying E[b])
            eb1, n1 = self._mean_b_and_norm()
            self._bbar_integral += 0.5 * (eb0 + eb1) * (n1 - n0) / (2 * self.config.temperature)
        return {"loss": float(loss.detach())}

    def _mean_b_and_norm(self):
        with torch.no_grad():
            b = self.model.attend(self.Xt).mean(0).cpu().double().numpy()
            Mc = self.config.Mc
            V = self.model.W[:Mc].detach().cpu().double().numpy()  # U_C = identity block
            return b, float((V**2).sum())

    def _zhat_terms(self, V):
        T = self.config.temperature
        sq = (V**2).sum(0)
        if self.config.attention == "linear":
            return (sq, sq, 0 * sq)
        if self.config.attention == "exp":
            return (sq / (2 * T), sq / (2 * T), 0 * sq)
        return softmax_zhat(V, self.xbar, T)

    def _zhat_alternatives(self, V):
        """Decision 4's other estimators: the official code's ``|W|_F^2`` (all of W, including the
        u_q and null-space parts), and a time-varying ``E[b]`` entering as the integral
        ``int E[b] d(sum_k |v_k|^2)/(2T)`` accumulated during training (a product ``E[b](t) |v|^2``
        would not be an invariant)."""
        T = self.config.temperature
        sq = (V**2).sum(0)
        with torch.no_grad():
            W = self.model.W.detach().cpu().double().numpy()
        return {"code": sq / (2 * T) - self.xbar * (W**2).sum() / (2 * T),
                "Eb": sq / (2 * T) - self._bbar_integral}

    def observables(self) -> dict[str, float]:
        c = self.config
        z, V, s = self.model.reduced()
        out: dict[str, float] = {f"z_{l + 1}": z[l] for l in range(c.Mc)}
        ks = range(c.K) if c.K * c.Mc <= 64 else range(1)
        out.update({f"v_{k + 1}_{l + 1}": V[k, l] for k in ks for l in range(c.Mc)})
        out.update({f"s_{k + 1}": s[k] for k in range(c.K)})
        zhat, t1, t2 = self._zhat_terms(V)
        if c.attention == "linear":  # z^2 - sum_k v_k^2 = c; zhat = sign(z(0)) sqrt(...), wrong once z_l crosses 0
            inv = z**2 - (V**2).sum(0)
            zh = np.sign(self._z0) * np.sqrt(np.maximum(zhat + self._c_linear, 0.0))
        else:
            inv = z - zhat
            zh = zhat + self._C
        out.update({f"invariant_{l + 1}": inv[l] for l in range(c.Mc)})
        out["invariant_max_abs_drift"] = float(np.abs(zh - z).max())
        out["nc_zhat_z"] = float(normalised_correlation(zh, z))
        out["nc_term1_z"] = float(normalised_correlation(t1, z))
        out["nc_term2_z"] = float(normalised_correlation(t2, z)) if np.ptp(t2) > 0 else float("nan")
        if np.ptp(z - self._z0) > 0:  # stricter (spec §5 Fig. 2): changes since init
            out["nc_change"] = float(normalised_correlation(zh - self._z0, z - self._z0))
        if c.attention == "softmax":
            for k, zh_alt in self._zhat_alternatives(V).items():
                out[f"nc_zhat_{k}_z"] = float(normalised_correlation(zh_alt + self._C_alt[k], z))
        with torch.no_grad():
            b = self.model.attend(self.Xt).cpu().double().numpy()
        bn = b / b.sum(1, keepdims=True)
        out["attention_entropy"] = float((-(bn * np.log(np.where(bn > 0, bn, 1))).sum(1)).mean())
        return {k: float(v) for k, v in out.items() if not (isinstance(v, float) and math.isnan(v))}

    def state_dict(self):
        return {**super().state_dict(), "bbar_integral": self._bbar_integral.copy()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self._bbar_integral = state["bbar_integral"]


@dataclass
class MixtureExperiment(_Trained):
    """The headline network (``mixture`` variant): :func:`theory.joma.mixture_data` sequences,
    softmax attention over the positions (:meth:`JomaBlock.attention_over_positions`), ``phi`` MLP
    with ``K`` = number of classes, cross-entropy on ``h``, full-batch SGD (same ``lr`` on ``W``
    and ``z``). Logged: ``z``, ``v_k_l``, ``s_k``, the entropy of the attention it computes, the
    Theorem-1 softmax estimate ``zhat`` (NC of changes, relative residual), and the drift of the
    back-propagated gradient ``G(t) = onehot - softmax(h)`` from ``G(0)`` (Assumption 1)."""

    config: JomaConfig
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = "mixture"

    def __post_init__(self):
        if self.config.variant != "mixture":
            raise ConfigError("variant", f"MixtureExperiment needs the 'mixture' variant, got {self.config.variant!r}")
        self.tokens, self.labels, self.X = mixture_data(self.config)

    def setup(self, device, generator):
        c = self.config
        W0, z0 = initial_parameters(c)
        self.model = JomaBlock(W0, z0, "softmax", c.activation, c.temperature, self.dtype).to(device)
        self.init_update()
        self.tok = torch.as_tensor(self.tokens, device=device)
        self.lab = torch.as_tensor(self.labels, device=device)
        self.xbar = self.X.mean(0)  # Decision 4: bbar ~ E[x]
        self.z0, V0, _ = self.model.reduced()
        self._C = self.z0 - softmax_zhat(V0, self.xbar, c.temperature)[0]
        self.G0 = self.gradient_rows()
        self.G0t = torch.as_tensor(self.G0, dtype=self.dtype, device=device)

    def logits(self):
        a, b = self.model.attention_over_positions(self.tok)
        return self.model.mlp(b), a

    def gradient_rows(self) -> np.ndarray:
        """``G (n, K) = onehot(y) - softmax(h)``: ``N * (-dL/dh)`` of the mean cross-entropy."""
        with torch.no_grad():
            h, _ = self.logits()
            p = torch.softmax(h, 1).cpu().double().numpy()
        return np.eye(self.config.K)[self.labels] - p

    def step(self, step):
        h, _ = self.logits()
        if self.config.top == "fixed":  # -dL/dh = G(0)/N exactly: the ODE's own objective
            loss = -(self.G0t * h).sum(1).mean()
        else:
            loss = nn.functional.cross_entropy(h, self.lab)
        loss.backward()
        self.apply_update()
        return {"loss": float(loss.detach())}

    def observables(self):
        c = self.config
        z, V, s = self.model.reduced()
        out = {f"z_{l + 1}": z[l] for l in range(c.Mc)}
        out.update({f"v_{k + 1}_{l + 1}": V[k, l] for k in range(c.K) for l in range(c.Mc)})
        out.update({f"s_{k + 1}": s[k] for k in range(c.K)})
        with torch.no_grad():
            h, a = self.logits()
            ent = -(a * torch.log(torch.where(a > 0, a, torch.ones_like(a)))).sum(-1).mean()
            out["accuracy"] = float((h.argmax(1) == self.lab).double().mean())
        out["attention_entropy"] = float(ent)
        zh = softmax_zhat(V, self.xbar, c.temperature)[0] + self._C
        dz = z - self.z0
        out["invariant_residual_rel"] = float(np.linalg.norm(zh - z) / max(np.linalg.norm(dz), 1e-300))
        if np.ptp(dz) > 0:
            out["nc_change"] = float(normalised_correlation(zh - self.z0, dz))
        out["g_drift"] = float(np.linalg.norm(self.gradient_rows() - self.G0) / np.linalg.norm(self.G0))
        return {k: float(v) for k, v in out.items()}


def probe_targets(generator: torch.Generator, n: int = len(FIG4_MU)) -> torch.Tensor:
    """The probe's targets ``2 mu`` (float64, (n,)) with ``mu = sort(3 U + 1)``, ``U ~ U(0, 1)^n``
    drawn (float32, as the official Fig. 4 script) from ``generator``: the official script's only
    random choice, so seed 0 gives :data:`~theory.joma.FIG4_MU` (to its 4 printed decimals) and
    every seed a fresh Fig.-4 draw."""
    u = torch.rand(n, generator=generator, device=generator.device)
    return 2 * torch.sort(u * 3 + 1).values.double()


@dataclass
class ProbeExperiment(_Trained):
    """Class ``n`` = a sequence of contextual token ``n`` (``x = e_n``) + the query; exp attention
    with temperature; ``K = 1`` hidden unit regressed on ``mu_n`` (loss ``mean_n (mu_n - h_n)^2/2``).
    Attention entropy is that of the query over a uniform bag: ``H(softmax(z/T))``. The targets
    ``mu`` (default ``None``) are drawn per seed by :func:`probe_targets` (twice Fig. 4's ``mu``)."""

    config: JomaConfig
    mu: tuple | None = None
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = "probe"

    def setup(self, device, generator):
        c = self.config
        target = probe_targets(generator) if self.mu is None else torch.as_tensor(self.mu, dtype=torch.float64)
        n = target.numel()
        W0 = np.zeros((n + 1, 1))
        self.model = JomaBlock(W0, np.zeros(n), "exp", c.activation, c.temperature, self.dtype).to(device)
        self.init_update()
        self.X = torch.eye(n, dtype=self.dtype, device=device)
        self.target = target.to(device=device, dtype=self.dtype)

    def step(self, step):
        loss = 0.5 * ((self.target - self.model(self.X)[:, 0]) ** 2).mean()
        loss.backward()
        self.apply_update()
        return {"loss": float(loss.detach())}

    def observables(self):
        z, V, s = self.model.reduced()
        out = {"attention_entropy": float(entropy(z / self.config.temperature))}
        out.update({f"v_{j + 1}": float(V[0, j]) for j in range(V.shape[1])})
        return out


@dataclass
class HBLTBlockExperiment(_Trained):
    """Softmax-attention block (one hidden unit, linear phi) on HBLT bags of the contextual leaves,
    trained by full-batch SGD to predict whether the query leaf is on (logistic loss): the upper
    layer's gradient ``g = y_query - sigmoid(h)``, so ``Delta_l = E[g x_l]`` is the query's
    co-occurrence excess with token ``l`` (spec §3.3-3.4)."""

    config: JomaConfig
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = "hblt_block"

    def __post_init__(self):
        rng = np.random.default_rng(self.config.data_seed)
        self.X, self.label, self.heights = hblt_block_data(self.config, self.config.hblt_samples, rng)

    def setup(self, device, generator):
        Mc = self.X.shape[1]
        self.model = JomaBlock(np.zeros((Mc + 1, 1)), np.zeros(Mc), self.config.attention, "linear", 1.0,
                               self.dtype).to(device)
        self.init_update()
        self.Xt = torch.as_tensor(self.X, dtype=self.dtype, device=device)
        self.yt = torch.as_tensor(self.label, dtype=self.dtype, device=device)

    def step(self, step):
        loss = nn.functional.binary_cross_entropy_with_logits(self.model(self.Xt)[:, 0], self.yt)
        loss.backward()
        self.apply_update()
        return {"loss": float(loss.detach())}

    def observables(self):
        z, V, s = self.model.reduced()
        out = {f"z_{l + 1}": float(z[l]) for l in range(z.size)}
        out.update({f"v_{l + 1}": float(V[0, l]) for l in range(z.size)})
        return out


@dataclass
class HierExperiment(_Trained):
    """Adam on the Table-1 model (spec §5 Table 1, scaled down); observables per layer: attention
    entropy (mean over query rows, eps = 1e-8, on a fixed test batch), stable rank of fc1, mean
    |cos| between fc2 columns (Decision after §5), and the alignment scores."""

    config: JomaConfig
    paper: str = PAPER
    name: str = "hier"

    def __post_init__(self):
        if self.config.variant != "hier":
            raise ConfigError("variant", f"HierExperiment needs the 'hier' variant, got {self.config.variant!r}")
        self.data = RandomCombinationHierarchy.from_config(self.config)

    def setup(self, device, generator):
        c = self.config
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        self.device = device
        self.model = HierTransformer(self.data.M, c.width, c.hidden, c.nlayer, self.data.num_class).to(device)
        self.init_update()  # Adam with weight decay (update.py)
        self.rng = np.random.default_rng(self.data.seed + 1)
        tok, lab, act = self.data.sample(c.n_test, np.random.default_rng(self.data.seed + 2))
        self.test = (torch.as_tensor(tok, device=device), torch.as_tensor(lab, device=device), act)

    def step(self, step):
        tok, lab, _ = self.data.sample(self.config.batch, self.rng)
        logits, _, _ = self.model(torch.as_tensor(tok, device=self.device))
        loss = nn.functional.cross_entropy(logits, torch.as_tensor(lab, device=self.device))
        loss.backward()
        self.apply_update()
        return {"loss": float(loss.detach())}

    def state_dict(self):  # the minibatch stream too: a resumed run draws the batches it would have
        return {**super().state_dict(), "data_rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.rng.bit_generator.state = state["data_rng"]

    def alignment(self) -> dict[str, float]:
        """``score{l}``: layer-l ReLU hidden activations max-pooled over positions vs the binary
        activity of level-(l+1) latents; Pearson (and cosine) correlation, max over hidden units,
        mean over latents (Decision 11)."""
        tok, _, act = self.test
        with torch.no_grad():
            _, _, hids = self.model(tok)
        out = {}
        for l in range(min(self.config.nlayer, len(act))):
            Hm = hids[l].max(1).values.double().cpu().numpy()  # (n, hidden)
            A = act[l].astype(float)
            for measure, centre in (("pearson", True), ("cosine", False)):
                Hc = Hm - Hm.mean(0) if centre else Hm
                Ac = A - A.mean(0) if centre else A
                num = Ac.T @ Hc
                den = np.linalg.norm(Ac, axis=0)[:, None] * np.linalg.norm(Hc, axis=0)[None, :]
                C = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
                out[f"score{l}_{measure}"] = float(C.max(1).mean())
        return out

    def observables(self):
        tok, lab, _ = self.test
        with torch.no_grad():
            logits, atts, _ = self.model(tok)
            out = {"test_accuracy": float((logits.argmax(1) == lab).double().mean())}
            for l, (a, blk) in enumerate(zip(atts, self.model.blocks)):
                ent = -(a * torch.log(a + 1e-8)).sum(-1).mean()
                out[f"attention_entropy_{l}"] = float(ent)
                out[f"stable_rank_{l}"] = stable_rank(blk.fc1.weight.detach().double().cpu().numpy())
                W2 = blk.fc2.weight.detach().double().cpu().numpy()  # (d, hidden): columns = out-proj vectors
                Wn = W2 / np.maximum(np.linalg.norm(W2, axis=0, keepdims=True), 1e-12)
                cos = np.abs(Wn.T @ Wn)
                out[f"mean_abs_cos_{l}"] = float((cos.sum() - np.trace(cos)) / (cos.size - cos.shape[0]))
        out.update(self.alignment())
        return out


#: variant -> experiment class
EXPERIMENTS = {"fixed": BlockExperiment, "ce": BlockExperiment, "mixture": MixtureExperiment,
               "probe": ProbeExperiment, "hblt": HBLTBlockExperiment, "hier": HierExperiment}


def experiment(config: JomaConfig, variant: str | None = None):
    """The experiment object of ``variant`` (default: ``config.variant``; another variant rebinds the
    config's explicit settings to it, and a setting it ignores is a ``ConfigError``)."""
    c = config if variant in (None, config.variant) else config.replace(variant=variant)
    if c.variant == "fixed" and c.batch != c.variant_default("batch"):
        raise ConfigError("batch", "the fixed block trains full-batch; batch is the minibatch of its SDE "
                                   "(tdyn simulate joma --sde)")
    return EXPERIMENTS[c.variant](c)


def train(config: JomaConfig, variant: str | None = None, *, device: str = "cpu", progress: bool = False,
          checkpoint=None, checkpoint_every: int | str | None = None, resume: bool = False):
    """``(trajectory, experiment)``: one run logged at the bound config's ``log_steps()``."""
    exp = experiment(config, variant)
    trainer = Trainer(device=device, progress=progress, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                      resume=resume)
    return trainer.run(exp), exp


def run(config: JomaConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False,
        checkpoint=None, checkpoint_every: int | str | None = None, resume: bool = False):
    """`tdyn train joma [--variant fixed|ce|mixture|probe|hblt|hier]`: one run, the trajectory
    (``variant``, when given, replaces ``config.variant``). A ``--set`` the variant would ignore is
    a ``ConfigError`` (exit 2)."""
    return train(config, variant, device=device, progress=progress, checkpoint=checkpoint,
                 checkpoint_every=checkpoint_every, resume=resume)[0]
