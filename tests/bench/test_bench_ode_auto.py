"""A speed **report** per paper's reduced ODE problem (``<paper>.problem(<Config>())``), not a
test of speed (`make bench`; skipped by default; no timed assertion).

Columns: tdyn ``simulate.solve(problem, method="auto")`` (numba backend), diffrax Kvaerno5 (through
``simulate.solve``, warm), scipy LSODA and Radau (``solve_ivp`` as a user calls it, no Jacobian),
and a compiled reference — SUNDIALS CVODE-BDF through scikit-sundae when installed (compiled
stepper, Python right-hand side). Rows: one warm solve, and a 1000-point map over one parameter
(0.8x to 1.2x its value): tdyn ``simulate.sweep(..., backend="numba", observables=False)`` (the
states, as LSODA gives them) and a scipy LSODA loop over all 1000 points; the slower methods on 50
of the points (time scaled by 20, marked ``*``). Every
method runs at rtol 1e-8, atol 1e-10. Accuracy: the largest error relative to each state's scale,
``max_t |y - y_ref| / max_t |y_ref|``, against scipy Radau at rtol 1e-12 (on 10 points of the map).
Printed as a table with the ratio LSODA / tdyn-auto; the goals (single >= 3x, map >= 30x at equal
or better accuracy) are recorded, never asserted.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import simulate

pytestmark = pytest.mark.benchmark

RTOL, ATOL = 1e-8, 1e-10
N_MAP, N_SLOW, N_REF = 1000, 50, 10


def _problems():
    from theory import joma, scan_snap, scb, topic

    return {"scb": (lambda: scb.problem(scb.SCBConfig()), "K"),
            "scan-snap": (lambda: scan_snap.problem(scan_snap.ScanSnapConfig()), "eta_Y"),
            "joma": (lambda: joma.problem(joma.JomaConfig()), "tau"),
            "topic": (lambda: topic.problem(topic.TopicConfig()), "eta")}


def _best(fn, n=5):
    best = np.inf
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _ivp(f, p, y0, ts, method, rtol=RTOL, atol=ATOL):
    r = solve_ivp(lambda t, y: f(t, y, p), (ts[0], ts[-1]), y0, method=method, t_eval=ts, rtol=rtol, atol=atol)
    return r.y.T if r.success else np.full((ts.size, y0.size), np.nan)


def _cvode():
    try:
        import sksundae
    except ImportError:
        return None

    def run(f, p, y0, ts):
        def rhs(t, y, yp):
            yp[:] = f(t, y, p)

        sol = sksundae.cvode.CVODE(rhs, method="BDF", rtol=RTOL, atol=ATOL).solve(ts, y0)
        return np.asarray(sol.y) if sol.success else np.full((ts.size, y0.size), np.nan)

    return run


def _err(Y, ref):
    scale = np.max(np.abs(ref), axis=0)
    scale = np.maximum(scale, 1e-6 * scale.max())  # a state that stays ~0 is measured on the largest scale
    return float(np.max(np.abs(Y - ref) / scale))


def _traj(ds, names):
    return np.stack([np.asarray(ds[n].values) for n in names], axis=-1)


@pytest.mark.parametrize("paper", list(_problems()))
def test_bench_ode_per_paper(paper, bench_row, benchmark):
    make, pname = _problems()[paper]
    P = make()
    S = P.system
    names = S.state_names
    p0 = S.parameter_vector(P.params)
    y0 = S.state_vector(P.y0)
    ts = np.asarray(P.t, dtype=np.float64)
    f = S.to_numpy()
    ref = _ivp(f, p0, y0, ts, "Radau", 1e-12, 1e-14)

    single = {}
    simulate.solve(P, method="auto", rtol=RTOL, atol=ATOL, observables=False)  # compile
    ds = benchmark.pedantic(lambda: simulate.solve(P, method="auto", rtol=RTOL, atol=ATOL, observables=False),
                            rounds=5, iterations=1)
    single["tdyn auto"] = (benchmark.stats.stats.min, _err(_traj(ds, names), ref))
    used = ds.attrs.get("method_used")
    simulate.solve(P, backend="diffrax", method="Kvaerno5", rtol=RTOL, atol=ATOL, observables=False)  # compile
    sec, ds = _best(lambda: simulate.solve(P, backend="diffrax", method="Kvaerno5", rtol=RTOL, atol=ATOL,
                                           observables=False), 3)
    single["diffrax Kvaerno5"] = (sec, _err(_traj(ds, names), ref))
    for m in ("LSODA", "Radau"):
        sec, Y = _best(lambda: _ivp(f, p0, y0, ts, m), 3)
        single[f"scipy {m}"] = (sec, _err(Y, ref))
    cvode = _cvode()
    if cvode is not None:
        sec, Y = _best(lambda: cvode(f, p0, y0, ts), 3)
        single["CVODE (sksundae)"] = (sec, _err(Y, ref))

    # the 1000-point map over one parameter
    values = P.params[pname] * np.linspace(0.8, 1.2, N_MAP)
    idx = S.parameter_names.index(pname)
    Pm = np.repeat(p0[None], N_MAP, axis=0)
    Pm[:, idx] = values
    slow = np.linspace(0, N_MAP - 1, N_SLOW).astype(int)
    refs = {int(b): _ivp(f, Pm[b], y0, ts, "Radau", 1e-12, 1e-14) for b in slow[:: N_SLOW // N_REF]}

    def map_err(Ys, rows):
        return max(_err(Ys[rows.index(b)], r) for b, r in refs.items())

    grid = {pname: values}
    simulate.sweep(S, P.params, grid, P.y0, ts, backend="numba", observables=False)  # compile
    sec, ds = _best(lambda: simulate.sweep(S, P.params, grid, P.y0, ts, backend="numba", observables=False), 2)
    mapped = {"tdyn auto": (sec, map_err(_traj(ds, names), list(range(N_MAP))), "")}
    t0 = time.perf_counter()
    Ys = [_ivp(f, Pm[b], y0, ts, "LSODA") for b in range(N_MAP)]
    mapped["scipy LSODA"] = (time.perf_counter() - t0, map_err(Ys, list(range(N_MAP))), "")
    rows = [int(b) for b in slow]
    scale = N_MAP / N_SLOW
    run = simulate.ode.diffrax_solver(S, "Kvaerno5", RTOL, ATOL, 1_000_000)
    t0 = time.perf_counter()
    Ys = [np.asarray(run(y0, Pm[b], ts).ys) for b in rows]
    mapped["diffrax Kvaerno5"] = ((time.perf_counter() - t0) * scale, map_err(Ys, rows), "*")
    t0 = time.perf_counter()
    Ys = [_ivp(f, Pm[b], y0, ts, "Radau") for b in rows]
    mapped["scipy Radau"] = ((time.perf_counter() - t0) * scale, map_err(Ys, rows), "*")
    if cvode is not None:
        t0 = time.perf_counter()
        Ys = [cvode(f, Pm[b], y0, ts) for b in rows]
        mapped["CVODE (sksundae)"] = ((time.perf_counter() - t0) * scale, map_err(Ys, rows), "*")

    print(f"\n{paper}: {S.name} ({len(names)} states, {ts.size} output times to t={ts[-1]:g}); "
          f"tdyn auto used {used}; map over {pname}")
    print(f"  {'method':<18} {'single (ms)':>12} {'max rel err':>12} {'1000-map (s)':>14} {'max rel err':>12}")
    for m in single:
        ms, e1 = single[m]
        sm, e2, mark = mapped.get(m, (np.nan, np.nan, ""))
        print(f"  {m:<18} {ms * 1e3:>12.3f} {e1:>12.2e} {sm:>13.3f}{mark or ' '} {e2:>12.2e}")
    r1 = single["scipy LSODA"][0] / single["tdyn auto"][0]
    r2 = mapped["scipy LSODA"][0] / mapped["tdyn auto"][0]
    acc1 = single["tdyn auto"][1] <= single["scipy LSODA"][1]
    acc2 = mapped["tdyn auto"][1] <= mapped["scipy LSODA"][1]
    print(f"  ratio LSODA / tdyn auto: single {r1:.1f}x (goal >= 3), 1000-point map {r2:.1f}x (goal >= 30); "
          f"accuracy equal or better: single {acc1}, map {acc2}")
    bench_row(f"{paper} ODE single solve: scipy LSODA / tdyn auto", r1, "x", goal=">= 3x", met=r1 >= 3 and acc1,
              seconds=single["tdyn auto"][0], baseline_seconds=single["scipy LSODA"][0])
    bench_row(f"{paper} ODE 1000-point map: scipy LSODA loop / tdyn auto", r2, "x", goal=">= 30x",
              met=r2 >= 30 and acc2, seconds=mapped["tdyn auto"][0], baseline_seconds=mapped["scipy LSODA"][0])
    assert single["tdyn auto"][1] < 1e-5 and mapped["tdyn auto"][1] < 1e-5  # the benchmarked solve is right
