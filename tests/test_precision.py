"""Sums over clients and samples ask for full float32 precision, whatever the caller's default.

On NVIDIA GPUs JAX runs a float32 contraction at its default precision in TF32 (10 mantissa bits):
aggregated models, feature statistics and the QP's Gram matrix would then carry ~1e-3 relative error
(seen on an H100: FedPAC's class statistics and FeSEM's averages off by up to 5e-3). The CPU ignores
the precision setting, so these tests read the programs instead of their numbers: every contraction
(``dot_general``) the primitives emit must carry ``Precision.HIGHEST`` even when the caller's default
is bfloat16.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pflax.algorithms import cfl, fedem, knnper
from pflax.algorithms.fedpac import combination
from pflax.core import aggregate, execution, stats

HIGHEST = jax.lax.Precision.HIGHEST


def _contraction_precisions(fn, *args) -> list:
    """The ``precision`` of every dot_general in ``fn``'s program, nested programs included."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                found.append(eqn.params["precision"])
            for value in eqn.params.values():
                for sub in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        walk(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        walk(sub)

    with jax.default_matmul_precision("bfloat16"):
        walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def _tree(m):
    rng = np.random.default_rng(0)
    return {"w": jnp.asarray(rng.standard_normal((m, 5, 3)), jnp.float32), "b": jnp.asarray(rng.standard_normal((m, 3)), jnp.float32)}


M, K, D, N = 4, 3, 6, 10
rng = np.random.default_rng(1)
FEATURES = jnp.asarray(rng.standard_normal((N, D)), jnp.float32)
LABELS = jnp.asarray(rng.integers(0, K, N), jnp.int32)
MASK = jnp.ones((N,), bool)

PRIMITIVES = {
    "weighted_mean": lambda: (aggregate.weighted_mean, _tree(M), jnp.arange(1.0, M + 1)),
    "mix": lambda: (aggregate.mix, _tree(M), jnp.full((M, M), 1.0 / M)),
    "aggregate_centroids": lambda: (
        aggregate.aggregate_centroids, jnp.ones((M, K, D)), jnp.ones((M, K)), jnp.zeros((K, D)), jnp.zeros((K,), bool)),
    "class_sums": lambda: (lambda f, y, mk: stats.class_sums(f, y, mk, K), FEATURES, LABELS, MASK),
    "qp_matrices_float32": lambda: (combination.combination_matrices, jnp.ones((M,)), jnp.ones((M, K, D))),
    "qp_official_eigen_rebuild_float32": lambda: (combination._official_preprocess, jnp.eye(M) - 0.5, jnp.int32(0)),
    "sum_over_valid_clients": lambda: (execution._sum_valid, _tree(M), jnp.array([True, True, False, True])),
    "cfl_cosine_similarities": lambda: (cfl.cosine_similarities, jnp.ones((M, 7))),
    "knn_probabilities": lambda: (
        lambda q, k, y, v: knnper.knn_probabilities(q, k, y, v, K, 3, 1.0), FEATURES[:4], FEATURES, LABELS, MASK),
}


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_client_and_sample_sums_ask_for_full_precision(name):
    fn, *args = PRIMITIVES[name]()
    precisions = _contraction_precisions(fn, *args)
    assert precisions, f"{name}: no contraction found (the test would check nothing)"
    assert all(p == (HIGHEST, HIGHEST) for p in precisions), f"{name}: {precisions}"


def test_fedem_mixture_asks_for_full_precision(monkeypatch):
    """The mixture of the components' predictions (weights pi) sums over components; the components'
    own forward passes (model arithmetic, default precision) are replaced by fixed logits here."""
    monkeypatch.setattr(fedem, "component_logits", lambda model, components, x: components)
    logits = jnp.asarray(np.random.default_rng(2).standard_normal((M, N, K)), jnp.float32)
    precisions = _contraction_precisions(lambda pi, z: fedem.mixture_probabilities(None, z, pi, None),
                                         jnp.full((M,), 1.0 / M), logits)
    assert precisions == [(HIGHEST, HIGHEST)]


def test_a_default_precision_contraction_is_caught():
    """The check itself can fail: a plain ``@`` under a bfloat16 default is reported as such."""
    precisions = _contraction_precisions(lambda a: a @ a.T, jnp.ones((3, 3)))
    assert precisions and all(p != (HIGHEST, HIGHEST) for p in precisions)
