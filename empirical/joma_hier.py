"""JoMA Table 1 in PyTorch (spec §3.5, §5 Table 1): the random-combination hierarchy and the
multi-layer Transformer, with per-layer attention entropy, MLP stable rank, mean |cos| of the MLP
out-projection columns and hidden-unit <-> latent alignment scores. Float32 (Adam; no ODE to match).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from theory.errors import ConfigError
from theory.joma import PAPER, JomaConfig, stable_rank

from .trainer import ModuleState

__all__ = ["RandomCombinationHierarchy", "HierBlock", "HierTransformer", "HierExperiment", "hier_experiment"]


@dataclass
class RandomCombinationHierarchy:
    """The official Table-1 generator (spec §3.5): level-0 tokens ``0..M-2`` (``M-1`` = padding);
    each latent of level ``i+1`` is a random unique subset of ``num_combinations[i]`` latents of
    level ``i``; the top level has ``num_class`` latents = classes. A sample draws a class and
    expands it top-down; its leaf tokens are written sorted at the end of a length-``L`` sequence."""

    M: int = 20
    L: int = 16
    num_tokens: tuple = (8, 4)  # latents per level 1..; the last is num_class
    num_combinations: tuple = (2, 2)
    seed: int = 0
    children: list = field(init=False)

    def __post_init__(self):
        if len(self.num_tokens) != len(self.num_combinations):
            raise ConfigError("num_combinations", "needs one entry per level of num_tokens")
        rng = np.random.default_rng(self.seed)
        sizes = [self.M - 1, *self.num_tokens]
        self.children = []
        for lev in range(len(self.num_tokens)):
            chosen: set = set()
            subsets = []
            while len(subsets) < sizes[lev + 1]:
                s = tuple(sorted(rng.choice(sizes[lev], self.num_combinations[lev], replace=False)))
                if s not in chosen:
                    chosen.add(s)
                    subsets.append(s)
            self.children.append(subsets)
        leaves_max = int(np.prod(self.num_combinations))
        if leaves_max > self.L:
            raise ConfigError("L", f"sequence length {self.L} < max number of leaf tokens {leaves_max}")

    @property
    def num_class(self) -> int:
        return self.num_tokens[-1]

    def sample(self, n: int, rng: np.random.Generator):
        """``(tokens (n, L), labels (n,), active)`` with ``active[i]`` (n, num_tokens[i]) the binary
        activity of level-``i+1`` latents."""
        top = len(self.num_tokens) - 1
        labels = rng.integers(0, self.num_class, n)
        tokens = np.full((n, self.L), self.M - 1, dtype=np.int64)
        active = [np.zeros((n, k), dtype=np.int8) for k in self.num_tokens]
        for i, c in enumerate(labels):
            cur = {int(c)}
            for lev in range(top, -1, -1):
                for a in cur:
                    active[lev][i, a] = 1
                cur = {ch for a in cur for ch in self.children[lev][a]}
            leaves = sorted(cur)
            tokens[i, self.L - len(leaves):] = leaves
        return tokens, labels, active



class HierBlock(nn.Module):
    """Single-head causal attention (bias-free Wq, Wk, Wv, no output projection), residual +
    LayerNorm; MLP d -> hidden -> d with ReLU, residual + LayerNorm."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.Wq, self.Wk, self.Wv = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        L, d = x.shape[1], x.shape[2]
        att = self.Wq(x) @ self.Wk(x).transpose(1, 2) / math.sqrt(d)
        mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        x = self.ln1(x + att @ self.Wv(x))
        hid = torch.relu(self.fc1(x))
        return self.ln2(x + self.fc2(hid)), att, hid


class HierTransformer(nn.Module):
    def __init__(self, M: int, d: int, hidden: int, nlayer: int, num_class: int):
        super().__init__()
        self.emb = nn.Embedding(M, d)
        self.blocks = nn.ModuleList(HierBlock(d, hidden) for _ in range(nlayer))
        self.readout = nn.Linear(d, num_class)

    def forward(self, tokens):
        x = self.emb(tokens)
        atts, hids = [], []
        for blk in self.blocks:
            x, a, h = blk(x)
            atts.append(a)
            hids.append(h)
        return self.readout(x[:, -1]), atts, hids


@dataclass
class HierExperiment(ModuleState):
    """Adam on the Table-1 model (spec §5 Table 1, scaled down); observables per layer: attention
    entropy (mean over query rows, eps = 1e-8, on a fixed test batch), stable rank of fc1, mean
    |cos| between fc2 columns (Decision after §5), and the alignment scores."""

    data: RandomCombinationHierarchy
    config: JomaConfig
    d: int = 64
    hidden: int = 80
    nlayer: int = 2
    lr: float = 1e-3
    wd: float = 1e-4
    batch: int = 128
    n_test: int = 512
    paper: str = PAPER
    name: str = "hier"

    def setup(self, device, generator):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        self.device = device
        self.model = HierTransformer(self.data.M, self.d, self.hidden, self.nlayer, self.data.num_class).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=self.wd)
        self.rng = np.random.default_rng(self.data.seed + 1)
        tok, lab, act = self.data.sample(self.n_test, np.random.default_rng(self.data.seed + 2))
        self.test = (torch.as_tensor(tok, device=device), torch.as_tensor(lab, device=device), act)

    def step(self, step):
        tok, lab, _ = self.data.sample(self.batch, self.rng)
        logits, _, _ = self.model(torch.as_tensor(tok, device=self.device))
        loss = nn.functional.cross_entropy(logits, torch.as_tensor(lab, device=self.device))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return {"loss": float(loss.detach())}

    def alignment(self) -> dict[str, float]:
        """``score{l}``: layer-l ReLU hidden activations max-pooled over positions vs the binary
        activity of level-(l+1) latents; Pearson (and cosine) correlation, max over hidden units,
        mean over latents (Decision 11)."""
        tok, _, act = self.test
        with torch.no_grad():
            _, _, hids = self.model(tok)
        out = {}
        for l in range(min(self.nlayer, len(act))):
            Hm = hids[l].max(1).values.double().cpu().numpy()  # (n, hidden)
            A = act[l].astype(float)
            for kind, centre in (("pearson", True), ("cosine", False)):
                Hc = Hm - Hm.mean(0) if centre else Hm
                Ac = A - A.mean(0) if centre else A
                num = Ac.T @ Hc
                den = np.linalg.norm(Ac, axis=0)[:, None] * np.linalg.norm(Hc, axis=0)[None, :]
                C = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
                out[f"score{l}_{kind}"] = float(C.max(1).mean())
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


    def parameters_info(self):
        return self.config.to_dict()




def hier_experiment(config: JomaConfig) -> HierExperiment:
    """The ``hier`` variant from the config (every setting read from it; scaled-down Table 1:
    M = vocab, L = seq_len, levels num_tokens, combinations num_combinations, Adam lr/wd)."""
    c = config if config.variant == "hier" else config.replace(variant="hier")
    data = RandomCombinationHierarchy(M=c.vocab, L=c.seq_len, num_tokens=c.num_tokens,
                                      num_combinations=c.num_combinations, seed=c.seed)
    return HierExperiment(data, c, d=c.width, hidden=c.hidden, nlayer=c.nlayer, lr=c.lr, wd=c.wd, batch=c.batch,
                          n_test=c.n_test)
