"""Count-vector SGD for Scan & Snap whose cost does not depend on T (spec §1.3, Decision 9).

For one sample the loss and every gradient depend on the sequence only through its token counts,
so a minibatch is drawn as counts ``q ~ Multinomial(T - 1, P(.|n))`` on the class support
(numpy's vectorised multinomial: no sequence, no loop over T) and the gradient of ``J`` is written
out by the chain rule of spec §2.4-2.5 — softmax over tokens with log-count offsets, l2
normalisation, decoder softmax — for ``R`` independent runs at once (all seeds x learning rates of a
grid in one vectorised call). Numpy, float64. The torch model (:mod:`empirical.scan_snap`) is the
reference: the gradients agree to round-off on the same counts (tests).
"""

from __future__ import annotations

import numpy as np

from theory.scan_snap import ScanSnapTask

__all__ = ["CountSGD"]


class CountSGD:
    """``R`` runs of minibatch SGD with PyTorch momentum (``v = mu v + g; theta += lr v``, ascent on
    J) on the direct (Y, Z) model. ``lr_Y``, ``lr_Z``: (R,) learning rates; ``Y`` (R, M_in, M_out),
    ``Z`` (R, M_in, M_in) start at zero or at PyTorch's default init U(+-1/sqrt(M_in)) drawn from
    ``rng`` (a seeded ``numpy.random.Generator``; same seed -> same numbers)."""

    def __init__(self, task: ScanSnapTask, lr_Y, lr_Z, *, batch: int, momentum: float, zero_init: bool,
                 rng: np.random.Generator):
        self.task, self.B, self.mu, self.rng = task, batch, momentum, rng
        self.lr_Y = np.asarray(lr_Y, float)[:, None, None]
        self.lr_Z = np.asarray(lr_Z, float)[:, None, None]
        R, Mi, Mo = self.lr_Y.shape[0], task.M_in, task.M_out
        if zero_init:
            self.Y, self.Z = np.zeros((R, Mi, Mo)), np.zeros((R, Mi, Mi))
        else:
            b = 1.0 / np.sqrt(Mi)
            self.Y, self.Z = rng.uniform(-b, b, (R, Mi, Mo)), rng.uniform(-b, b, (R, Mi, Mi))
        self.vY, self.vZ = np.zeros_like(self.Y), np.zeros_like(self.Z)
        self.sup = np.stack([task.support(n) for n in range(task.K)])  # (K, S): equal sizes (generator)
        self.sup_p = np.take_along_axis(task.P, self.sup, 1)
        self.onehot_label = np.eye(Mo)[task.label]  # (K, M_out)
        self.onehot_query = np.eye(Mi)  # row x_T of Z

    def sample(self):
        """Classes ``n`` (R, B) and support counts (R, B, S) summing to ``T - 1``."""
        R = self.Y.shape[0]
        n = self.rng.integers(0, self.task.K, (R, self.B))
        return n, self.rng.multinomial(self.task.config.T - 1, self.sup_p[n]).astype(np.float64)

    def gradient(self, n, counts):
        """Batch-mean ascent gradient of J per run: ``(gY, gZ)`` shaped like ``Y``, ``Z``; ``n``
        (R, B) classes, ``counts`` (R, B, S) on each class's support. Dense in token space (M_in):
        every product is a batched matmul."""
        R, B = n.shape
        q = self.task.query[n]  # (R, B) query token of each sample
        dense = np.zeros((R, B, self.task.M_in))
        np.put_along_axis(dense, self.sup[n], counts, -1)
        zq = np.take_along_axis(self.Z, q[..., None], 1)  # rows z_{x_T}: (R, B, M_in)
        with np.errstate(divide="ignore"):
            logits = np.where(dense > 0, zq + np.log(dense), -np.inf)  # -inf where a token is absent
        mix = np.exp(logits - logits.max(-1, keepdims=True))
        mix /= mix.sum(-1, keepdims=True)  # X^T b (spec §1.3)
        nrm = np.sqrt((mix * mix).sum(-1, keepdims=True))
        f = mix / nrm  # LN(X^T b)
        w = f @ self.Y  # logits Y^T f: (R, B, M_out)
        a = np.exp(w - w.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        d = self.onehot_label[n] - a  # dJ/dw = e_n - alpha
        g = d @ self.Y.transpose(0, 2, 1)  # dJ/df = Y (e_n - alpha) (Lemma 1): (R, B, M_in)
        dmix = (g - f * (f * g).sum(-1, keepdims=True)) / nrm  # through the l2 normalisation
        dlog = mix * (dmix - (mix * dmix).sum(-1, keepdims=True))  # through the softmax over tokens
        gY = f.transpose(0, 2, 1) @ d / B
        onehot_q = self.onehot_query[q]  # (R, B, M_in)
        gZ = onehot_q.transpose(0, 2, 1) @ dlog / B  # row x_T of Z collects its samples
        return gY, gZ

    def step(self):
        gY, gZ = self.gradient(*self.sample())
        self.vY = self.mu * self.vY + gY
        self.vZ = self.mu * self.vZ + gZ
        self.Y = self.Y + self.lr_Y * self.vY
        self.Z = self.Z + self.lr_Z * self.vZ
        if not (np.isfinite(self.Y).all() and np.isfinite(self.Z).all()):
            from theory.errors import DivergenceError

            raise DivergenceError(-1, "non-finite parameters in count-vector SGD")
