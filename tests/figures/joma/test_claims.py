"""figures/joma/claims.py + claims.toml: per claim, the theory's own trajectory passes the criterion
at every in-regime point of the quick map, and a planted violation is decided ``fails``; the
statistics and regime quantities on cases with known answers."""

import importlib
import math

import numpy as np
import pytest
import xarray as xr

from figures.claims import planted_violation, theory_check
from theory import joma as J

C = importlib.import_module("figures.joma.claims")


@pytest.fixture(scope="module")
def registry():
    return C.decide_registry.registry()


def test_registry_lists_the_papers_claims(registry):
    assert registry.names == ["invariant_holds", "invariant_holds_mixture", "entropy_drops_then_bounces",
                              "learning_order_lowest_lca_first", "sde_band_covers_sgd"]
    for spec in registry.claims:  # the SDE's own claim runs minibatch SGD (tests/figures/joma/test_calibration.py)
        runs = "figures.joma.calibration:calibration_runs" if spec.name == "sde_band_covers_sgd" else \
            "empirical.joma.seeds:train_seeds"
        assert spec.runs == runs and spec.theory
        assert spec.theory_flow.startswith("exact:") and spec.null is not None
    practice = {s.name: s.practice for s in registry.claims}
    assert practice == {"invariant_holds": "the paper's network", "invariant_holds_mixture": "the paper's network",
                        "entropy_drops_then_bounces": "reduced model",
                        "learning_order_lowest_lca_first": "reduced model", "sde_band_covers_sgd": "reduced model"}
    # the paper's own Fig. 2 run (2000 SGD steps at lr 0.1: t = 200), both panels, and Fig. 4's step/length
    demos = {s.name: [d.coords for d in s.demos] for s in registry.claims}
    assert demos["invariant_holds"] == [{"t": 200, "lr": 0.1, "data": "gaussian"}, {"t": 200, "lr": 0.1, "data": "random"}]
    assert demos["entropy_drops_then_bounces"] == [{"horizon": 5000, "lr": 0.02}]


# ---- Theorem 1 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["invariant_holds", "invariant_holds_mixture"])
def test_invariant_on_the_exact_flow_holds_early_and_breaks_by_t200(registry, name):
    """The exact flow (G recomputed, nothing frozen) keeps Theorem 1's invariant while the logits
    have barely moved (t <= 50: residual < 1 in every theory seed) and loses it by Fig. 2's horizon
    (t = 200: residual > 1, the magnitude overshoots while the correlation of the changes stays
    high): the network's verdict ("fails" at t = 200) is the exact flow's, not an SGD artefact."""
    check = theory_check(registry.get(name))
    early = [p for p in check.points if p.coords["t"] <= 50]
    late = [p for p in check.points if p.coords["t"] == 200]
    assert early and all(p.theory_decision.verdict == "holds" and max(p.theory) < 0.5 for p in early), str(check)
    assert late and all(p.theory_decision.verdict == "fails" and min(p.theory) > 1.5 for p in late), str(check)


def _reflected(traj):
    """The logits moving against the invariant: z(t) -> 2 z(0) - z(t), zhat unchanged."""
    out = traj.copy()
    for v in traj.data_vars:
        if v.startswith("z_"):
            z = traj[v].values
            out[v] = ("time", 2 * z[0] - z)
    return out


@pytest.mark.parametrize("name", ["invariant_holds", "invariant_holds_mixture"])
def test_invariant_planted_violation_fails(registry, name):
    """Logits whose change is the opposite of the invariant's prediction: residual ~ 2 > 1."""
    from empirical.joma.seeds import train_seeds

    spec = registry.get(name)
    cfg = spec.protocol.config(J.JomaConfig, True).replace(steps=100)
    runs = train_seeds(cfg, seeds=range(5))
    planted = [_reflected(runs.isel(seed=i)) for i in range(5)]
    t = float(cfg.ode_time(60))
    assert planted_violation(spec, planted, config=cfg, t=t).verdict == "fails"
    assert planted_violation(spec, [runs.isel(seed=i) for i in range(5)], config=cfg, t=t).verdict == "holds"


def test_invariant_residual_on_a_known_trajectory():
    t = np.linspace(0, 1, 11)
    ds = xr.Dataset({"z_1": ("time", 1 + 3 * t), "z_2": ("time", -4 * t), "zhat_1": ("time", 1 + 3 * t),
                     "zhat_2": ("time", 0 * t)}, coords={"time": t})
    # dz = (3, -4) t, dzhat = (3, 0) t: residual |(0, -4)| / 5 = 0.8 at every t > 0
    assert C.invariant_residual(ds, None, t=0.5) == pytest.approx(0.8)
    assert math.isnan(C.invariant_residual(ds, None, t=2.0))  # past the run's end


def test_invariant_regime_reads_the_exact_flow_at_t():
    cfg = J.JomaConfig.preset("toy", True, steps=2000)
    th = C.block_theory(cfg)
    assert len(th) == len(C.EXACT_SEEDS)
    q = C.invariant_regime(cfg, {"t": 50.0})
    i = int(np.argmin(abs(th[0]["time"].values - 50.0)))
    assert th[0]["time"].values[i] == 50.0
    spreads = [np.ptp([tr[f"z_{l + 1}"].values[i] for l in range(cfg.Mc)]) / cfg.temperature for tr in th]
    assert q["attention_logit_spread"] == pytest.approx(max(spreads))
    assert q["g_drift"] == pytest.approx(max(tr["g_drift"].values[i] for tr in th))
    # lr x curvature: linear in lr at a fixed flow (the flow does not read lr), non-decreasing in t
    q2 = C.invariant_regime(cfg.replace(lr=0.2, steps=1000), {"t": 50.0})
    assert q2["lr_curvature"] == pytest.approx(2 * q["lr_curvature"], rel=1e-6)
    assert C.invariant_regime(cfg, {"t": 200.0})["lr_curvature"] >= q["lr_curvature"]


def test_exact_flow_is_the_trained_toys_limit():
    """The official toy trained by SGD (autograd, its own loss) converges to :func:`exact_theory`
    (the gradient flow integrated by scipy, G recomputed along the path) with the first-order error
    of Euler steps: halving the learning rate halves the gap of the logits at t = 20."""
    from empirical.joma.seeds import train_seeds

    gaps = []
    for lr in (0.4, 0.2):
        cfg = J.JomaConfig.preset("toy", True, lr=lr, steps=int(20 / lr), log_every=int(5 / lr))
        net = train_seeds(cfg, seeds=[1]).isel(seed=0)
        flow = C.exact_theory(cfg)[1]
        z = lambda d, i=-1: np.array([d[f"z_{l + 1}"].values[i] for l in range(cfg.Mc)])  # noqa: E731
        gaps.append(np.abs(z(net) - z(flow)).max() / np.abs(z(flow) - z(flow, 0)).max())
    assert gaps[1] < 0.05 and 0.4 < gaps[1] / gaps[0] < 0.6, gaps


def test_invariant_null_rotates_the_estimate():
    """The null control predicts each logit from the token Mc/2 away: same runs, zhat rotated."""
    from empirical.joma.seeds import train_seeds

    cfg = J.JomaConfig.preset("toy", True, steps=50)
    runs = train_seeds(cfg, seeds=[0, 1])
    null = C.invariant_null_runs(cfg, seeds=[0, 1])
    for l in range(cfg.Mc):
        np.testing.assert_array_equal(null[f"zhat_{l + 1}"].values, runs[f"zhat_{(l + 10) % 20 + 1}"].values)
        np.testing.assert_array_equal(null[f"z_{l + 1}"].values, runs[f"z_{l + 1}"].values)


def test_invariant_residual_nc_measure_on_a_known_trajectory():
    t = np.linspace(0, 1, 11)
    ds = xr.Dataset({"z_1": ("time", 3 * t), "z_2": ("time", -4 * t), "z_3": ("time", 0 * t),
                     "zhat_1": ("time", 30 * t), "zhat_2": ("time", -40 * t), "zhat_3": ("time", 0 * t)},
                    coords={"time": t})
    # zhat's change is 10x z's: the magnitude residual is 9, the correlation of the changes is 1
    assert C.invariant_residual(ds, None, t=0.5) == pytest.approx(9.0)
    assert C.invariant_residual(ds, None, t=0.5, measure="nc") == pytest.approx(0.0, abs=1e-12)
    flipped = ds.assign(zhat_1=("time", -30 * t), zhat_2=("time", 40 * t))
    assert C.invariant_residual(flipped, None, t=0.5, measure="nc") == pytest.approx(2.0)


# ---- Theorem 4 -------------------------------------------------------------------------------------
def test_bounce_theory_passes_its_criterion(registry):
    check = theory_check(registry.get("entropy_drops_then_bounces"))
    assert check.holds, str(check)
    assert len(check.points) >= 2


def test_bounce_planted_violation_fails(registry):
    """The theory's own entropies with the rebound reflected downwards (the entropy keeps falling
    after its turning point): negative rebound at every seed."""
    spec = registry.get("entropy_drops_then_bounces")
    cfg = spec.protocol.config(J.JomaConfig, True)
    planted = []
    for tr in C.bounce_theory(cfg):
        H = tr["attention_entropy"].values
        i = int(np.argmin(H))
        falling = np.concatenate([H[:i + 1], 2 * H[i] - H[i + 1:]])
        planted.append(tr.assign(attention_entropy=("time", falling)))
    assert planted_violation(spec, planted, config=cfg, horizon=1000).verdict == "fails"


def test_entropy_rebound_on_known_curves():
    cfg = J.JomaConfig.preset("probe", True)  # t = 0.01 step
    t = cfg.ode_times()
    v = xr.Dataset({"attention_entropy": ("time", 1 + (t - 5) ** 2 / 25)}, coords={"time": t})
    # T = 20 (2000 steps): min over [0, 10] is 1 at t = 5, H(20) = 1 + 225/25 = 10
    assert C.entropy_rebound(v, cfg, horizon=2000) == pytest.approx(9.0)
    mono = v.assign(attention_entropy=("time", 2 - t / 40))  # still falling: H(T) - min over [0, T/2] < 0
    assert C.entropy_rebound(mono, cfg, horizon=2000) == pytest.approx(-0.25)
    assert math.isnan(C.entropy_rebound(v, cfg, horizon=10**6))
    # the robustness row "horizon x4" reads the curve at 4 T
    assert C.entropy_rebound(v, cfg, horizon=500, horizon_factor=4) == C.entropy_rebound(v, cfg, horizon=2000)


def test_probe_flow_is_the_trained_probes_limit():
    """The probe network trained by SGD (autograd) follows the gradient flow of :func:`probe_flow`
    (formulas typed independently), with the first-order error of Euler steps: halving the step
    halves the gap."""
    from empirical.joma.seeds import train_seeds

    gaps = []
    for lr in (0.004, 0.002):
        cfg = J.JomaConfig.preset("probe", True, lr=lr, steps=int(3 / lr), log_every=int(0.5 / lr))
        net = train_seeds(cfg, seeds=[3]).isel(seed=0)["attention_entropy"].values
        flow = C.bounce_theory(cfg)[3]["attention_entropy"].values  # the theory's seeds 0..4
        gaps.append(np.abs(net - flow).max())
    assert gaps[1] < 1.5e-3 and 0.4 < gaps[1] / gaps[0] < 0.6, gaps


def test_bounce_regime_quantities(registry):
    cfg = J.JomaConfig.preset("probe", True, log_every=10)
    q_small, q_big = (C.bounce_regime(cfg.replace(lr=lr), {"horizon": 1000}) for lr in (0.01, 0.1))
    assert q_big["lr_curvature"] == pytest.approx(10 * q_small["lr_curvature"])
    # t* in ~[1.5, 3.5] for Fig.-4 draws: at T = 10 (lr 0.01) the turn lies in the first half
    assert 0.15 < q_small["turn_fraction"] < 0.5 and q_big["turn_fraction"] == pytest.approx(q_small["turn_fraction"] / 10)


# ---- §3.4 learning order ----------------------------------------------------------------------------
def test_learning_order_theory_passes_its_criterion(registry):
    check = theory_check(registry.get("learning_order_lowest_lca_first"))
    assert check.holds, str(check)


def _ordered_tokens(config, faster_high: bool, seed: int):
    """z_l(t) = a_l (1 - exp(-t / tau_l)) with tau increasing (or decreasing) in the LCA height."""
    H = J.hblt_leaf_lca_heights(config.depth, config.branching, 0)[1:]
    rng = np.random.default_rng(seed)
    tau = 100.0 * (5 - H if faster_high else H) * rng.uniform(0.9, 1.1, H.size)
    t = config.ode_times()
    return xr.Dataset({f"z_{l + 1}": ("time", rng.uniform(0.5, 2) * (1 - np.exp(-t / tau[l]))) for l in range(H.size)},
                      coords={"time": t})


def test_learning_order_planted_violation_fails(registry):
    spec = registry.get("learning_order_lowest_lca_first")
    cfg = spec.protocol.config(J.JomaConfig, True)
    planted = [_ordered_tokens(cfg, True, s) for s in range(5)]
    assert planted_violation(spec, planted, config=cfg, horizon=1500).verdict == "fails"
    right = [_ordered_tokens(cfg, False, s) for s in range(5)]
    assert planted_violation(spec, right, config=cfg, horizon=1500).verdict == "holds"


def test_order_spearman_excludes_suppressed_tokens():
    cfg = J.JomaConfig(variant="hblt", steps=100, log_every=1)
    t = cfg.ode_times()
    H = J.hblt_leaf_lca_heights(4, 2, 0)[1:]
    # H = 1 and H = 2 tokens rise (H = 1 faster); every other token is suppressed, and the suppressed
    # H = 4 tokens fall fastest: counted as "learned", they would reverse the order
    z = {f"z_{l + 1}": ("time", (1 - np.exp(-t / (10 if h == 1 else 40))) if h <= 2 else -(1 - np.exp(-t / 2)))
         for l, h in enumerate(H)}
    ds = xr.Dataset(z, coords={"time": t})
    assert C.order_spearman(ds, cfg, horizon=100) == pytest.approx(np.corrcoef([1, 2, 2], [1, 2, 2])[0, 1] * 0 + 1)
    only_one = xr.Dataset({k: ("time", v[1] if k == "z_1" else -np.abs(v[1])) for k, v in z.items()}, coords={"time": t})
    assert math.isnan(C.order_spearman(only_one, cfg, horizon=100))


def test_hblt_regime_resolution():
    cfg = J.JomaConfig(variant="hblt", rho=0.8, hblt_samples=1024)
    want = 0.8**6 * (1 - 0.8**2) / (2 * math.sqrt(2 / 1024))
    assert C.hblt_regime(cfg, {})["height_resolution"] == pytest.approx(want)
    assert C.hblt_regime(cfg.replace(rho=0.0), {})["height_resolution"] == 0.0


def test_registry_symbols_and_labels_are_mathtext():
    """Every symbol and axis label of both registries renders (the claims' map figures)."""
    import tomllib
    from pathlib import Path

    from matplotlib.mathtext import MathTextParser

    parser, seen = MathTextParser("agg"), []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("symbol", "label") and isinstance(v, str):
                    parser.parse(v)
                    seen.append(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for name in ("claims.toml", "text_claims.toml"):
        walk(tomllib.loads((Path(C.__file__).with_name(name)).read_text()))
    assert len(seen) > 20
