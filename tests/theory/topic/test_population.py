"""theory.topic.population: the full-vocabulary stage-2 loss against the spec's appendix code."""

from __future__ import annotations

import numpy as np
import pytest

from theory import topic as tp


def _spec_stage2_loss(sc, W, T, v, tau, pm, pc, pr):
    """docs/papers/topic.md Appendix `stage2_loss` (typed from the spec; an independent check)."""
    def outputs(W, cls, hM):
        Ht = {}
        for c, h, t, _ in cls:
            Ht[t] = Ht.get(t, 0.) + c * h
        Hw = sum(Ht.values())
        outs = [(c, W['A'] * h + W['B'] * (Ht[t] - h) + W['C'] * (Hw - Ht[t]) + W['m'] * hM + W['bw'], y) for c, h, t, y in cls]
        return outs, W['r'] * Hw + W['s'] * hM + W['bM']

    def sq(outs, oM):
        return sum(c * (o - y) ** 2 for c, o, y in outs) + oM**2
    s1, s2, s3, sMw, swM, sMM = sc
    e = np.exp
    a = 1 - pm + pm * pc; rho = pm * pr / (T * v); m0 = pm * (1 - pc - pr); fin = a / (tau * v) + rho; fo = rho; ti = 1 / (tau * v)
    Z = tau * v * fin * e(swM) + (T - tau) * v * fo * e(swM) + m0 * e(sMM)
    cls = [(v, fin * e(swM) / Z, ('S', k), ti) for k in range(tau)] + [(v, fo * e(swM) / Z, ('O', k), 0.) for k in range(T - tau)]
    LM = sq(*outputs(W, cls, m0 * e(sMM) / Z)) + 1 - ti
    Z = fin * e(s1) + (v - 1) * fin * e(s2) + (tau - 1) * v * fin * e(s3) + (T - tau) * v * fo * e(s3) + m0 * e(sMw)
    base = [(v, fin * e(s3) / Z, ('S', k)) for k in range(tau - 1)] + [(v, fo * e(s3) / Z, ('O', k)) for k in range(T - tau)]
    cls = [(1, fin * e(s1) / Z, 'q', 1.), (v - 1, fin * e(s2) / Z, 'q', 0.)] + [(c, h, t, 0.) for c, h, t in base]
    Lc = sq(*outputs(W, cls, m0 * e(sMw) / Z))
    cls = [(1, fin * e(s1) / Z, 'q', ti), (v - 1, fin * e(s2) / Z, 'q', ti)] + [(c, h, t, (ti if t[0] == 'S' else 0.)) for c, h, t in base]
    Lri = sq(*outputs(W, cls, m0 * e(sMw) / Z)) + 1 - ti
    Z = fo * e(s1) + (v - 1) * fo * e(s2) + tau * v * fin * e(s3) + (T - tau - 1) * v * fo * e(s3) + m0 * e(sMw)
    cls = [(1, fo * e(s1) / Z, 'q', 0.), (v - 1, fo * e(s2) / Z, 'q', 0.)] + [(v, fin * e(s3) / Z, ('S', k), ti) for k in range(tau)] \
        + [(v, fo * e(s3) / Z, ('O', k), 0.) for k in range(T - tau - 1)]
    Lro = sq(*outputs(W, cls, m0 * e(sMw) / Z)) + 1 - ti
    return (1 - pc - pr) * LM + pc * Lc + pr * (tau / T * Lri + (1 - tau / T) * Lro)


def test_stage2_loss_matches_spec_appendix_at_random_logits():
    cfg = tp.TopicConfig(T=5, v=3, tau=2, p_m=0.2, p_c=0.15, p_r=0.2)
    rng = np.random.default_rng(1)
    coords = dict(A=0.3, B=0.2, C=-0.05, m=0.1, r=-0.2, s=0.05, b_w=0.02, b_M=0.01)
    W, b = tp.full_value_matrix(coords, cfg.T, cfg.v)
    Wspec = dict(coords, bw=coords["b_w"], bM=coords["b_M"])
    for _ in range(3):
        sc = rng.normal(0, 1, 6)
        mine = float(tp.stage2_loss(tp.tied_logits(cfg.T, cfg.v, *sc), W, b, cfg, documents="all"))
        spec = _spec_stage2_loss(sc, Wspec, cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r)
        assert mine == pytest.approx(spec, rel=1e-12)
