"""Today's SCB SDE engines as they were before the derived noise (hand-built noise), kept as independent
references for the derived SDEs of theory.scb.sde: the full (V, A) minibatch SDE with Gumbel
sampling of every token (``MinibatchSDE``) and the reduced SDE of docs/papers/scb.md §3.6 with its hand-written
drift (``reduced_drift``) and per-sample projection (``projected_per_sample``). The tests hold the
derived models against these: same drift, same per-sample flows, same ensemble moments within
Monte-Carlo error. Not used by the package."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from theory.sampling import alias_draw, alias_table
from theory.scb.config import PAPER, SCBTask, initial_parameters
from theory.scb.population import TaskArrays, observables_from_parameters, preconditioned_flow
from theory.scb.sde import _inverse_cdf, _support_weights, reduced_coordinates, reduced_observables, sample_tables


# ------------------------------------------------------------------------------------------------
# 1. Minibatch SGD on the full (V, A) (spec §3.6 option A)
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class MinibatchSDE:
    """``d theta = drift dt + diffusion dW`` on theta = (V, A) flattened, time in optimiser steps.

    * drift: the preconditioned population flow (exact, spec §3.2-3.3);
    * diffusion: minibatch noise. Its covariance is ``lr^2 Cov_sample(preconditioned g)/B``; the
      covariance is estimated at the current theta from ``mc_samples`` fresh per-sample gradients
      (spec §3.6 option A), and enters as the matrix ``lr * (g_m - mean g)/sqrt((M-1) B)`` driven by
      an M-dimensional Brownian motion, so no covariance matrix or square root is ever formed.
    Float64 throughout.
    """

    task: SCBTask
    eta_V: float
    eta_A: float
    batch: int
    mc_samples: int = 64
    paper: str = PAPER
    name: str = "minibatch_sgd"

    @property
    def dim(self) -> int:
        return self.task.N ** 2 + self.task.T * self.task.N

    @property
    def noise_dim(self) -> int:
        return self.mc_samples

    def initial_state(self) -> np.ndarray:
        V0, A0 = initial_parameters(self.task.config, self.task)
        return np.concatenate([V0.ravel(), A0.ravel()])

    def args(self):
        import jax.numpy as jnp

        t = self.task
        return {
            "P": jnp.asarray(t.P), "mu": jnp.asarray(t.mu), "Qm": jnp.asarray(t.Qm),
            "Sig": jnp.asarray(t.Sigma),
            "lr_V": jnp.asarray(self.eta_V), "lr_A": jnp.asarray(self.eta_A),
            "batch": jnp.asarray(float(self.batch)),
        }

    def _unflatten(self, y):
        N, T_ = self.task.N, self.task.T
        return y[: N * N].reshape(N, N), y[N * N:].reshape(T_, N)

    def drift(self, t, y, args):
        import jax.numpy as jnp

        V, A = self._unflatten(y)
        task = TaskArrays(args["P"], args["mu"], args["Qm"], args["Sig"])
        dV, dA = preconditioned_flow(V, A, task, args["lr_V"], args["lr_A"], xp=jnp)  # spec §3.3
        return jnp.concatenate([dV.ravel(), dA.ravel()])

    def per_sample_gradients(self, y, args, key):
        """(M, dim) preconditioned per-sample gradients at theta (spec §3.2), M = mc_samples.
        Data drawn exactly as spec §1.2 (query outside the context)."""
        import jax
        import jax.numpy as jnp

        N, T_, M = self.task.N, self.task.T, self.mc_samples
        V, A = self._unflatten(y)
        mu, P, Qm = args["mu"], args["P"], args["Qm"]
        kx, kk, ks, ko = jax.random.split(key, 4)
        logmu = jnp.log(mu)
        x = jax.random.categorical(kx, logmu, shape=(M, T_))
        k = jax.random.categorical(kk, logmu, shape=(M,))
        logq = jnp.where(Qm.T[k] > 0, jnp.log(jnp.where(Qm.T[k] > 0, Qm.T[k], 1.0)), -jnp.inf)
        pos = jax.random.categorical(ks, logq, axis=-1)
        xs = jnp.take_along_axis(x, pos[:, None], axis=1)[:, 0]
        logP = jnp.log(jnp.maximum(P.T[xs], 1e-300))
        xo = jax.random.categorical(ko, logP, axis=-1)

        # batched over the M samples; X a via a one-hot contraction over the N token ids
        Xoh = jax.nn.one_hot(x, N, dtype=y.dtype)  # (M, T, N)
        a = A.T[k]  # (M, T): a^(k_m)
        Xa = jnp.einsum("mtn,mt->mn", Xoh, a)
        r = Xa @ V.T - jax.nn.one_hot(xo, N, dtype=y.dtype)  # (M, N)
        gV = r[:, :, None] * Xa[:, None, :] / mu[None, None, :]  # r (X a)^T D^-1
        ga = jnp.take_along_axis(r @ V, x, axis=1) / mu[k][:, None]  # (X^T V^T r) / mu_k, (M, T)
        gA = ga[:, :, None] * jax.nn.one_hot(k, N, dtype=y.dtype)[:, None, :]  # only column k_m
        return jnp.concatenate([args["lr_V"] * gV.reshape(M, -1), args["lr_A"] * gA.reshape(M, -1)], axis=1)

    def diffusion(self, t, y, args, key):
        import jax.numpy as jnp

        G = self.per_sample_gradients(y, args, key)
        G = G - G.mean(0, keepdims=True)
        return (G / jnp.sqrt((self.mc_samples - 1) * args["batch"])).T  # (dim, M)

    def state_variables(self, Y: np.ndarray) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """Split ``Y`` (..., dim) into named variables with extra dims for the Dataset."""
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        return {
            "V": (("row", "col"), Y[..., : N * N].reshape(*lead, N, N)),
            "A": (("position", "query"), Y[..., N * N:].reshape(*lead, T_, N)),
        }

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        N, T_ = self.task.N, self.task.T
        lead = Y.shape[:-1]
        V = Y[..., : N * N].reshape(*lead, N, N)
        A = Y[..., N * N:].reshape(*lead, T_, N)
        return observables_from_parameters(V, A, self.task)


# ------------------------------------------------------------------------------------------------
# 2. The reduced SDE (spec §3.6), hand-written drift and projection
# ------------------------------------------------------------------------------------------------
def _split(y, N):
    return y[0], y[1], y[2:2 + N], y[2 + N:2 + 2 * N], y[2 + 2 * N], y[3 + 2 * N], y[4 + 2 * N:4 + 3 * N]


def _drift(y, c, xp):
    """Reduced drift (module docstring), ``c``: dict of task constants; ``xp``: numpy or jax.numpy."""
    N = c["mu"].shape[0]
    zeta, omega, xi, beta, E_V, E_v, E_a = _split(y, N)
    mu, T, rho, K, m2 = c["mu"], c["T"], c["rho"], c["K"], c["m2"]
    s = T * xi + beta
    n = T * xi**2 + 2 * xi * beta + rho * beta**2 + E_a
    cc = xi + rho * beta
    vv, vp = K * zeta**2 + E_V, K * zeta
    v2, mv = m2 * omega**2 + E_v, m2 * omega
    mn, S1, S2 = mu @ n, mu @ s, mu @ s**2
    lV, lA = c["lr_V"], c["lr_A"]
    return xp.concatenate([
        xp.stack([-lV * (mn * zeta - mu @ cc), -lV * (S2 * omega - S1)]),
        -lA * (vv * xi + s * v2 - mv), -lA * (vv * beta - vp),
        xp.stack([-2 * lV * mn * E_V, -2 * lV * S2 * E_v]), -2 * lA * vv * E_a,
    ])


def _constants(task: SCBTask, eta_V: float, eta_A: float, batch: int, xp=np):
    return {
        "mu": xp.asarray(task.mu), "T": float(task.T), "rho": xp.asarray(task.rho), "K": task.K, "m2": task.m2,
        "P": xp.asarray(task.P), "Pt": xp.asarray(task.P_tilde), "Qw": xp.asarray(_support_weights(task)),
        "lr_V": xp.asarray(float(eta_V)), "lr_A": xp.asarray(float(eta_A)), "batch": xp.asarray(float(batch)),
    }


def reduced_drift_numpy(y, task: SCBTask, eta_V: float, eta_A: float) -> np.ndarray:
    """The reduced drift at one reduced state ``y`` (numpy; used by the tests)."""
    return _drift(np.asarray(y, float), _constants(task, eta_V, eta_A, 1), np)


def projected_per_sample(y, koh, b, cnt, yoh, c, xp=np):
    """Per-sample preconditioned gradients at the on-manifold point of ``y``, projected.

    Sufficient statistics of one sample: query ``koh`` (one-hot, (N,)), ``b = X q_k`` (N,),
    all-context token counts ``cnt = X 1`` (N,), target ``yoh`` (one-hot, (N,)). Returns ``(g_red (2+2N,), off (2+N,))``: the gradient's (zeta, omega, xi,
    beta) components (xi, beta nonzero at query k only) and the squared norms of its off-manifold
    parts (R in the Sigma norm, r_v, delta_k at query k), learning rates included (spec §3.2, §3.6)."""
    N = c["mu"].shape[0]
    zeta, omega, xi, beta, *_ = _split(y, N)
    mu, T, rho, K, m2, Pt = c["mu"], c["T"], c["rho"], c["K"], c["m2"], c["Pt"]
    xk, ek, rk, muk = koh @ xi, koh @ beta, koh @ rho, koh @ mu
    h = xk * cnt + ek * b  # X a_k
    s = T * xk + ek
    Pth = Pt @ h
    r = zeta * Pth + omega * s * mu - yoh  # V X a - e_y
    mr = mu @ r
    lV, lA = c["lr_V"], c["lr_A"]
    g_zeta = lV * (Pth @ r) / K
    g_omega = lV * s * mr / m2
    off_v = lV**2 * s**2 * (r @ r - mr**2 / m2)
    off_R = lV**2 * (r @ r) * ((h**2 / mu).sum() - s**2) - K * g_zeta**2
    w = zeta * (Pt.T @ r) + omega * mr  # V^T r
    scale = lA / muk
    i1, iq, nn = scale * (w @ cnt), scale * (w @ b), scale**2 * ((w**2) @ cnt)
    det = T * rk - 1.0
    g_xi = (rk * i1 - iq) / det
    g_eta = (T * iq - i1) / det
    off_a = nn - (T * g_xi**2 + 2 * g_xi * g_eta + rk * g_eta**2)
    onehot = koh
    g = xp.concatenate([xp.stack([g_zeta, g_omega]), g_xi * onehot, g_eta * onehot])
    return g, xp.concatenate([xp.stack([off_R, off_v]), off_a * onehot])


@dataclass(frozen=True, eq=False)
class ReducedMinibatchSDE:
    """The reduced minibatch-SGD SDE (module docstring), state (zeta, omega, xi_1..N, beta_1..N,
    E_V, E_v, E_a,1..N), time in optimiser steps. ``noise_dim = mc_samples``."""

    task: SCBTask
    eta_V: float
    eta_A: float
    batch: int
    mc_samples: int = 2  # centred on the exact mean, any M >= 1 gives the right covariance in mean
    paper: str = PAPER
    name: str = "minibatch_sgd_reduced"

    @property
    def noise_dim(self) -> int:
        return self.mc_samples

    @cached_property
    def _tables(self):
        return sample_tables(self.task)

    @property
    def uniforms_per_step(self) -> int | None:
        """One uniform per sample and outcome table (alias draws, :func:`sample_tables`); ``None``
        (a PRNG key per step) when the tables would be too large."""
        return None if self._tables is None else self.mc_samples * len(self._tables)

    @property
    def state_names(self) -> tuple[str, ...]:
        N = self.task.N
        return ("zeta", "omega", *(f"xi_{i}" for i in range(1, N + 1)), *(f"beta_{i}" for i in range(1, N + 1)),
                "E_V", "E_v", *(f"E_a_{i}" for i in range(1, N + 1)))

    def initial_state(self) -> np.ndarray:
        V0, A0 = initial_parameters(self.task.config, self.task)
        return reduced_coordinates(V0, A0, self.task)

    def args(self):
        import jax.numpy as jnp

        c = _constants(self.task, self.eta_V, self.eta_A, self.batch, jnp)
        c["support"] = jnp.asarray(self.task.support)
        c["cdf_mu"] = jnp.asarray(np.cumsum(self.task.mu))
        c["cdf_q"] = jnp.asarray(np.cumsum(_support_weights(self.task), axis=1))  # (N, Q)
        c["cdf_P"] = jnp.asarray(np.cumsum(self.task.P, axis=0).T)  # row j: cdf of P[:, j]
        if self._tables is not None:
            c["tables"] = [(jnp.asarray(pr), jnp.asarray(al), jnp.asarray(F))
                           for pr, al, F in ((*alias_table(p), F) for p, F in self._tables)]
        return c

    def drift(self, t, y, args):
        import jax.numpy as jnp

        return _drift(y, args, jnp)

    def _table_features(self, args, u):
        """(M, 4N) features (e_k, X q_k, X 1, e_y) of ``mc_samples`` samples: one alias draw per
        sample and outcome table (``u``: the step's uniforms, (mc_samples * tables,)); the tables'
        features add (:func:`sample_tables`)."""
        u = u.reshape(self.mc_samples, len(args["tables"]))
        return sum(Ft[alias_draw(u[:, i], pr, al)] for i, (pr, al, Ft) in enumerate(args["tables"]))

    def _table_samples(self, y, args, u):
        """Projected per-sample gradients from ``mc_samples`` alias draws per table (``u``: the
        step's uniforms, (mc_samples * tables,))."""
        import jax
        import jax.numpy as jnp

        N = self.task.N
        F = self._table_features(args, u)
        koh, b, cnt, yoh = F[:, :N], F[:, N:2 * N], F[:, 2 * N:3 * N], F[:, 3 * N:]
        return jax.vmap(lambda kk, bb, cc, yy: projected_per_sample(y, kk, bb, cc, yy, args, jnp))(koh, b, cnt, yoh)

    def _samples(self, y, args, key):
        """Projected per-sample gradients of ``mc_samples`` samples drawn from sufficient statistics
        (spec §1.2): k ~ mu, the Q support tokens ~ mu, the T - Q off-support tokens as counts,
        the target ~ P[:, x_s] with s ~ q_k. All uniforms come from one draw."""
        import jax
        import jax.numpy as jnp

        N, T_, Q_ = self.task.N, self.task.T, self.task.support.shape[1]
        n_off = T_ - Q_
        M = self.mc_samples
        many = n_off > 64
        u = jax.random.uniform(key, (M, Q_ + 3 + (0 if many else n_off)), dtype=y.dtype)
        ids = jnp.arange(N)
        k = _inverse_cdf(u[:, 0], args["cdf_mu"])  # (M,)
        xs = _inverse_cdf(u[:, 1:Q_ + 1], args["cdf_mu"])  # (M, Q)
        koh = (k[:, None] == ids).astype(y.dtype)  # (M, N)
        j = _inverse_cdf(u[:, Q_ + 1], koh @ args["cdf_q"])  # support slot s ~ q_k
        xsj = jnp.take_along_axis(xs, j[:, None], axis=1)[:, 0]
        yt = _inverse_cdf(u[:, Q_ + 2], ((xsj[:, None] == ids).astype(y.dtype)) @ args["cdf_P"])
        xs_oh = (xs[..., None] == ids).astype(y.dtype)  # (M, Q, N)
        if many:
            c_off = jax.random.multinomial(jax.random.fold_in(key, 1), float(n_off), args["mu"],
                                           shape=(M, N)).astype(y.dtype)
        else:
            off = _inverse_cdf(u[:, Q_ + 3:], args["cdf_mu"])
            c_off = (off[..., None] == ids).astype(y.dtype).sum(1)
        cnt = c_off + xs_oh.sum(1)
        b = jnp.einsum("mq,mqn->mn", koh @ args["Qw"], xs_oh)  # X q_k
        yoh = (yt[:, None] == ids).astype(y.dtype)
        return jax.vmap(lambda kk, bb, cc, yy: projected_per_sample(y, kk, bb, cc, yy, args, jnp))(koh, b, cnt, yoh)

    def drift_and_diffusion(self, t, y, args, noise):
        """One step's ``(f (dim,), g (dim, M))`` from one set of samples: ``g`` the centred projected
        per-sample gradients (energy rows 0); ``f`` the exact drift plus the energies' Itô terms
        ``mean_m |g_off,m|^2 / B`` (an unbiased estimate of ``tr Cov(off)/B``). ``noise``: the
        step's uniforms (:attr:`uniforms_per_step`) or, without tables, a PRNG key."""
        import jax.numpy as jnp

        N, M = self.task.N, self.mc_samples
        G, off = (self._samples if self._tables is None else self._table_samples)(y, args, noise)
        y_on = y.at[2 + 2 * N:].set(0.0)
        f = _drift(y, args, jnp)
        mean = -_drift(y_on, args, jnp)[: 2 + 2 * N]  # exact population mean of g on the manifold
        D = -(G - mean).T / jnp.sqrt(M * args["batch"])  # (2+2N, M); the update is -g
        f = f.at[2 + 2 * N:].add(off.mean(0) / args["batch"])
        return f, jnp.concatenate([D, jnp.zeros((2 + N, M), y.dtype)], axis=0)

    def diffusion(self, t, y, args, key):
        """The noise matrix alone (the engine calls :meth:`drift_and_diffusion`)."""
        return self.drift_and_diffusion(t, y, args, key)[1]

    def observables(self, Y: np.ndarray) -> dict[str, np.ndarray]:
        return reduced_observables(Y, self.task)
