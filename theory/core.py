"""The ReducedSystem abstraction.

A paper module derives its reduced gradient flow symbolically (from a loss) and packages it as a
:class:`ReducedSystem`: ordered state symbols, parameter symbols, right-hand sides, optional
diffusion, named intermediate quantities (``definitions``), invariants, closed forms and named
observables. Everything downstream (solvers, SDE ensembles, exporters, the CLI) works from this one
object, so that what is integrated is exactly what was derived.

Exporters (``theory/export.py``): :meth:`ReducedSystem.to_latex`, :meth:`to_python` (numpy source),
:meth:`to_jax_source` (jit-able JAX source), :meth:`to_json` (+ :func:`theory.load_system`), and the
callables :meth:`to_numpy` / :meth:`to_jax` with the fixed argument order ``f(t, y, p)`` where ``y``
follows ``state`` and ``p`` follows ``parameters``.

Numeric callables (:meth:`to_numpy`, :meth:`to_jax`, :meth:`jacobian_numpy`, :meth:`diffusion_jax`,
:meth:`observables_numpy`, :meth:`closed_forms_numpy`) come from one lambdify path
(:meth:`ReducedSystem.lambdify`, which evaluates the ``definitions`` as leading assignments) and are
built once per system object (:meth:`ReducedSystem.compiled`).
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import sympy as sp

from .errors import ConfigError
from .numeric import compile_expressions, enable_x64, jax_modules, numpy_modules
from .symbols import TIME

if TYPE_CHECKING:
    from .noise import Noise

__all__ = ["ReducedSystem", "compile_expressions", "jax_modules", "numpy_modules", "enable_x64", "TIME"]


def _check_name(system: str, sym: sp.Symbol) -> None:
    name = str(sym)
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{system}: symbol name {name!r} is not a Python identifier (exports need one)")


@dataclass(frozen=True, eq=False)
class ReducedSystem:
    """A reduced gradient-flow system ``dy/dt = rhs(y; p)`` [+ ``diffusion(y; p) dW``].

    Frozen and hashed by identity, so compiled solvers can be cached per system object; compare two
    systems with :meth:`equivalent`.

    Attributes
    ----------
    name:        short identifier, e.g. ``"symmetric"``.
    paper:       paper key (``"scb"``).
    state:       ordered state symbols; arrays of states follow this order.
    parameters:  ordered parameter symbols; parameter vectors follow this order.
    rhs:         one sympy expression per state (same order as ``state``); may use the symbols of
                 ``definitions``.
    definitions: ordered ``((symbol, expr), ...)``: the paper's named intermediate quantities (e.g.
                 SCB's ``<a,q>``); an expression may use the symbols defined before it. Exporters
                 print them as definitions; numeric callables evaluate them as leading assignments
                 (:meth:`expanded_rhs` substitutes them symbolically).
    diffusion:   optional ``len(state) x m`` sympy Matrix (Ito), ``None`` for an ODE.
    observables: name -> expression of state and parameters; logged under the same names by
                 the empirical side.
    invariants:  name -> expression whose time derivative along the flow is zero (or small).
    closed_forms: name -> expression (of ``t`` and parameters) for known solutions/formulas.
    spec:        the section of ``papers/<paper>.md`` implemented.
    description: one paragraph for humans.
    noise:       optional :class:`theory.noise.Noise`: the minibatch noise derived from the
                 per-sample loss (per-sample flow, ``Cov_x[g]``, how exact); ``theory.noise_sde``
                 makes it an SDE.
    """

    name: str
    paper: str
    state: tuple[sp.Symbol, ...]
    parameters: tuple[sp.Symbol, ...]
    rhs: tuple[sp.Expr, ...]
    diffusion: sp.Matrix | None = None
    observables: Mapping[str, sp.Expr] = field(default_factory=dict)
    invariants: Mapping[str, sp.Expr] = field(default_factory=dict)
    closed_forms: Mapping[str, sp.Expr] = field(default_factory=dict)
    spec: str = ""
    description: str = ""
    definitions: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()
    noise: "Noise | None" = None

    def __post_init__(self):
        object.__setattr__(self, "state", tuple(self.state))
        object.__setattr__(self, "parameters", tuple(self.parameters))
        object.__setattr__(self, "rhs", tuple(sp.sympify(e) for e in self.rhs))
        object.__setattr__(self, "definitions", tuple((s, sp.sympify(e)) for s, e in self.definitions))
        if len(self.rhs) != len(self.state):
            raise ValueError(f"{self.name}: {len(self.rhs)} right-hand sides for {len(self.state)} states")
        defined = [s for s, _ in self.definitions]
        for s in (*self.state, *self.parameters, *defined):
            _check_name(f"{self.paper}/{self.name}", s)
        names = [str(s) for s in (*self.state, *self.parameters, *defined)]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: a name is used twice among state, parameters and definitions")
        known = set(self.state) | set(self.parameters) | {TIME}
        for s, e in self.definitions:
            unknown = e.free_symbols - known
            if unknown:
                raise ValueError(f"{self.name}: definition {s} uses undeclared symbols {sorted(map(str, unknown))}")
            known.add(s)
        free = set().union(*(e.free_symbols for e in self.rhs)) if self.rhs else set()
        unknown = free - known
        if unknown:
            raise ValueError(f"{self.name}: rhs uses undeclared symbols {sorted(map(str, unknown))}")
        if self.noise is not None:
            self.noise.validate(self)

    # -- basic views ----------------------------------------------------------------------------
    @cached_property
    def state_names(self) -> tuple[str, ...]:
        """The state symbols' names (computed once: sympy's printer is slow, and solves and maps read
        them per call)."""
        return tuple(str(s) for s in self.state)

    @cached_property
    def parameter_names(self) -> tuple[str, ...]:
        """The parameter symbols' names (computed once, as :attr:`state_names`)."""
        return tuple(str(s) for s in self.parameters)

    def expand_definitions(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` with every definition symbol replaced by its expression (in state/parameters)."""
        for s, e in reversed(self.definitions):
            expr = expr.xreplace({s: e})
        return expr

    @cached_property
    def expanded_rhs(self) -> tuple[sp.Expr, ...]:
        """The right-hand sides in state and parameters only (definitions substituted; computed
        once per system: the substitution is slow for large systems)."""
        if not self.definitions:
            return self.rhs
        return tuple(self.expand_definitions(e) for e in self.rhs)

    @property
    def rhs_dict(self) -> dict[sp.Symbol, sp.Expr]:
        return dict(zip(self.state, self.expanded_rhs))

    def rhs_matrix(self) -> sp.Matrix:
        return sp.Matrix(self.expanded_rhs)

    def jacobian(self) -> sp.Matrix:
        return self.rhs_matrix().jacobian(sp.Matrix(self.state))

    def time_derivative(self, expr: sp.Expr) -> sp.Expr:
        """d(expr)/dt along the drift (Lie derivative); zero for an exact invariant."""
        expr = self.expand_definitions(expr)
        return sum(sp.diff(expr, s) * f for s, f in zip(self.state, self.expanded_rhs))

    def parameter_vector(self, values: Mapping[str, float]) -> np.ndarray:
        missing = [n for n in self.parameter_names if n not in values]
        if missing:
            raise ConfigError(missing[0], f"no value given for parameter of system {self.paper}/{self.name}")
        return np.array([float(values[n]) for n in self.parameter_names], dtype=np.float64)

    def state_vector(self, values: Mapping[str, float] | Sequence[float] | np.ndarray) -> np.ndarray:
        if isinstance(values, Mapping):
            missing = [n for n in self.state_names if n not in values]
            if missing:
                raise ConfigError(missing[0], f"no initial value for state of {self.paper}/{self.name}")
            return np.array([float(values[n]) for n in self.state_names], dtype=np.float64)
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (len(self.state),):
            raise ConfigError("y0", f"expected {len(self.state)} initial values, got shape {arr.shape}")
        return arr

    def equivalent(self, other: "ReducedSystem") -> bool:
        """Same names, symbols and expressions (floats compared as float64 values)."""
        from .export import system_signature

        return system_signature(self) == system_signature(other)

    # -- exporters (theory/export.py) ------------------------------------------------------------
    def to_latex(self, expanded: bool = False) -> str:
        """An ``align`` environment: definitions ``q &:= ...`` then ``\\dot{x} &= ...`` per state,
        lines of at most 120 characters (:func:`theory.export.to_latex`). ``expanded=True``
        substitutes the definitions (per-component expansion)."""
        from .export import to_latex

        return to_latex(self, expanded=expanded)

    def latex_dict(self) -> dict[str, str]:
        """State name -> its right-hand side in LaTeX (the printer of :meth:`to_latex`)."""
        from .export import latex

        return {str(s): latex(f) for s, f in zip(self.state, self.rhs)}

    def to_python(self, suffix: str = "") -> str:
        """Self-contained numpy source defining ``rhs(t, y, p)`` and ``observables(y, p)``."""
        from .export import to_source

        return to_source(self, "numpy", suffix)

    def to_jax_source(self, suffix: str = "") -> str:
        """Self-contained JAX source defining a jit-able ``rhs(t, y, p)``."""
        from .export import to_source

        return to_source(self, "jax", suffix)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict that :func:`theory.load_system` reads back to an equivalent system."""
        from .export import to_json

        return to_json(self)

    # -- numeric callables: compiled once per system object ---------------------------------------
    def compiled(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()``, memoised on this system object under ``key``: the one cache of compiled
        callables (the lambdified functions below; ``simulate`` keeps its jitted solvers here too),
        so each is built once per system and dies with it. Not pickled (:meth:`__getstate__`)."""
        cache = self.__dict__.setdefault("_compiled", {})
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_compiled", None)  # lambdified and jitted functions do not pickle; rebuilt on use
        return state

    def lambdify(self, exprs: Sequence[sp.Expr], modules: str = "numpy", *, definitions: bool = True) -> Callable:
        """The one lambdify path: ``f(t, y, p)`` evaluating the flat list ``exprs`` (which may use the
        definitions' symbols) with ``modules`` ``"numpy"`` (:func:`numpy_modules`) or ``"jax"``
        (:func:`jax_modules`). The definitions become leading assignments of the generated
        function (as in the exported source), then common subexpressions; substituting them
        symbolically first can take minutes. ``definitions=False`` for expressions already in
        state and parameters only (the expanded Jacobian): no leading assignments, plain
        ``cse``. Not cached: the methods below cache what they build."""
        defs = list(self.definitions) if definitions else []

        def cse(items):
            reps, reduced = sp.cse(items, optimizations="basic")
            return defs + list(reps), reduced

        return compile_expressions((TIME, self.state, self.parameters), exprs, modules, cse=cse if defs else True)

    def to_numpy(self) -> Callable[[float, np.ndarray, np.ndarray], np.ndarray]:
        """``f(t, y, p) -> dy/dt`` as a numpy array (float64); built once per system."""
        return self.compiled("to_numpy", self._build_numpy)

    def _build_numpy(self):
        f = self.lambdify(list(self.rhs), "numpy")
        dim = len(self.state)

        def rhs(t, y, p):
            return np.asarray(f(t, y, p), dtype=np.float64).reshape(dim)

        return rhs

    def to_jax(self) -> Callable:
        """``f(t, y, p) -> dy/dt`` traceable by jax (jit/vmap/grad); built once per system."""
        return self.compiled("to_jax", self._build_jax)

    def _build_jax(self):
        import jax.numpy as jnp

        f = self.lambdify(list(self.rhs), "jax")

        def rhs(t, y, p):
            out = f(t, y, p)
            return jnp.stack([jnp.broadcast_to(jnp.asarray(o, dtype=y.dtype), ()) for o in out])

        return rhs

    def jacobian_numpy(self) -> Callable[[float, np.ndarray, np.ndarray], np.ndarray]:
        """``J(t, y, p) -> d(dy/dt)/dy`` as a ``(dim, dim)`` float64 array (what implicit scipy
        methods take as ``jac``); the Jacobian of :attr:`expanded_rhs`, built once per system."""
        def build():
            dim = len(self.state)
            f = self.lambdify(list(self.jacobian()), "numpy", definitions=False)  # row-major entries
            return lambda t, y, p: np.asarray(f(t, y, p), dtype=np.float64).reshape(dim, dim)

        return self.compiled("jacobian_numpy", build)

    def diffusion_jax(self) -> Callable:
        """``g(t, y, p) -> (dim, noise_dim)`` jax array of the Ito ``diffusion`` matrix (which may use
        the definitions' symbols); built once per system. ``ConfigError`` for an ODE."""
        if self.diffusion is None:
            raise ConfigError("system", f"{self.paper}/{self.name} has no diffusion")

        def build():
            import jax.numpy as jnp

            f = self.lambdify(list(self.diffusion), "jax")  # row-major entries
            shape = (len(self.state), int(self.diffusion.shape[1]))
            return lambda t, y, p: jnp.asarray(f(t, y, p), dtype=y.dtype).reshape(shape)

        return self.compiled("diffusion_jax", build)

    def _named_numpy(self, table: Mapping[str, sp.Expr]):
        names = list(table)
        if not names:
            return names, None
        exprs = [sp.sympify(table[n]) for n in names]
        return names, self.lambdify(exprs, "numpy")

    def observables_numpy(self) -> Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]:
        """``g(Y, p) -> {name: array}`` vectorised over a leading time axis of ``Y`` (shape (n, d));
        built once per system."""
        return self.compiled("observables_numpy", self._build_observables)

    def _build_observables(self):
        names, f = self._named_numpy(self.observables)
        if f is None:
            return lambda Y, p: {}

        def obs(Y, p):
            Y = np.asarray(Y, dtype=np.float64)
            cols = tuple(Y[..., i] for i in range(Y.shape[-1]))
            vals = f(0.0, cols, p)
            return {n: np.broadcast_to(np.asarray(v, dtype=np.float64), Y.shape[:-1]).copy()
                    for n, v in zip(names, vals)}

        return obs

    def closed_forms_numpy(self) -> Callable[..., dict[str, np.ndarray]]:
        """``h(t, p, y=None) -> {name: array}``: the closed forms as numpy functions of time ``t``
        (any shape) and the parameter vector ``p``; ``y`` (a state vector) only for forms that
        use the state. Figures use this instead of sympy symbols. Built once per system."""
        return self.compiled("closed_forms_numpy", self._build_closed_forms)

    def _build_closed_forms(self):
        names, f = self._named_numpy(self.closed_forms)
        if f is None:
            return lambda t, p, y=None: {}
        dim = len(self.state)

        def forms(t, p, y=None):
            t = np.asarray(t, dtype=np.float64)
            y = np.zeros(dim) if y is None else np.asarray(y, dtype=np.float64)
            vals = f(t, tuple(y), np.asarray(p, dtype=np.float64))
            return {n: np.broadcast_to(np.asarray(v, dtype=np.float64), t.shape).copy()
                    for n, v in zip(names, vals)}

        return forms
