"""Training with a collaboration structure, and placing a new client into it (FedCollab, Bao et al.,
ICML 2023, §4.3; official ``src/main.py`` in https://github.com/baowenxuan/FedCollab).

Each coalition is an independent FL system: a fresh model from the *same* key, only its members'
data, any pflax algorithm (a :class:`pflax.core.federated.Algorithm` registry entry or its module).
A singleton coalition is therefore local training run by the same code.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Union

import jax
import numpy as np

from ...core import federated
from ...data.clients import ClientData
from .solver import canonical, coalitions_of, objective

__all__ = ["train_coalitions", "assign_new_client"]


def _as_algorithm(algo: Union[federated.Algorithm, ModuleType]):
    """The registry entry of ``algo`` (a module exposes it as ``ALGORITHM``); anything else with
    ``init/round/evaluate`` of the contract's signatures is used as it is."""
    return getattr(algo, "ALGORITHM", algo)


def _train_one(algo, key, model, train: ClientData, test: ClientData, config: Any, rounds: int):
    from ...experiment import loop

    state = algo.init(key, model, train.x[0, :1], train.num_clients, config)
    # Every member takes part in every round; evaluated once, after the last round, with the training
    # split (algorithms that personalise at evaluation, fine-tuning or kNN datastores, need it).
    _, record = loop(algo, state, train, test, rounds, eval_every=0, on_nonfinite="continue")
    return np.asarray(record.evaluations[-1]["accuracy"])


def _local_ids(data: ClientData, members: list[int]) -> ClientData:
    """Members' rows renumbered 0..k-1: each coalition is a federation of its own."""
    sub = data.take(members)
    return sub.replace(client_ids=jax.numpy.arange(len(members), dtype=jax.numpy.int32))


def train_coalitions(algo: Union[federated.Algorithm, ModuleType], assignment, model, train: ClientData,
                     test: ClientData, key, config: Any, rounds: int) -> np.ndarray:
    """Final-round test accuracy of every client, each trained inside its own coalition.

    Args:
      algo: the algorithm run inside every coalition: a registry entry
        (:class:`pflax.core.federated.Algorithm`) or an algorithm module such as
        :mod:`pflax.algorithms.fedavg`.
      assignment: ``[N]`` coalition labels, one per client (e.g. from :func:`.solver.solve`).
      model: the flax model every coalition starts from (initialised from ``key``).
      train, test: the federation's training and test splits (same N rows).
      key: PRNG key; every coalition starts from the same one.
      config: ``algo``'s ``Config``.
      rounds: rounds of ``algo.round`` in every coalition (all members participate).

    Returns:
      ``[N]`` test accuracy of every client after ``rounds`` rounds, from ``algo.evaluate(state, test,
      train)`` of its coalition.

    >>> from pflax.algorithms import fedavg
    >>> from pflax.data import toy_federation
    >>> from pflax.models import mlp
    >>> train, test = toy_federation()
    >>> acc = train_coalitions(fedavg, [0, 1], mlp(10, hidden=(8,)), train, test, jax.random.PRNGKey(0),
    ...                        fedavg.Config(local_epochs=1), rounds=1)  # two singletons: local training
    >>> acc.shape
    (2,)
    """
    algo = _as_algorithm(algo)
    assignment = np.asarray(assignment)
    if assignment.shape != (train.num_clients,):
        raise ValueError(f"assignment needs one label per client ({train.num_clients}), got shape {assignment.shape}")
    acc = np.zeros(train.num_clients)
    for members in coalitions_of(assignment):
        acc[members] = _train_one(algo, key, model, _local_ids(train, members), _local_ids(test, members),
                                  config, rounds)
    return acc


def assign_new_client(assignment, dist, sizes, new_dist, new_size: float, c: float, allow_local: bool = True) -> dict:
    """Best coalition for a newcomer without re-solving: the option (join coalition k, or train
    locally) with the lowest objective over all N + 1 clients, other clients' coalitions unchanged.

    Args:
      assignment: ``[N]`` the existing coalition labels.
      dist: ``[N, N]`` the existing clients' estimated distances D_hat.
      sizes: ``[N]`` their sample counts.
      new_dist: ``[N]`` the estimated distances between the newcomer and the existing clients.
      new_size: the newcomer's sample count.
      c: the objective's constant ``C`` (:mod:`.solver`).
      allow_local: whether training alone is an option.

    Returns:
      ``{"assignment" [N+1] (canonical), "joined" (members it joined; [] for local), "objective"}``.

    >>> assign_new_client([0, 0], np.zeros((2, 2)), [10, 10], [0.0, 0.0], 10, c=1.0)["joined"]  # no shift: join
    [0, 1]
    >>> assign_new_client([0, 1], np.zeros((2, 2)), [10, 10], [1.0, 1.0], 10, c=0.0)["assignment"].tolist()
    [0, 1, 2]
    """
    p = canonical(assignment)
    n = len(p)
    dist, new_dist = np.asarray(dist, np.float64), np.asarray(new_dist, np.float64)
    grown = np.zeros((n + 1, n + 1))
    grown[:n, :n], grown[n, :n], grown[:n, n] = dist, new_dist, new_dist
    all_sizes = np.append(np.asarray(sizes, np.float64), new_size)
    options = [label for label in sorted(set(p.tolist()))] + ([n] if allow_local else [])
    best = None
    for label in options:  # strict improvement: earlier (smaller-member) coalitions win ties
        candidate = np.append(p, label)
        value = objective(candidate, grown, all_sizes, c)
        if best is None or value < best[1]:
            best = (candidate, value)
    candidate, value = best
    joined = np.flatnonzero(candidate[:n] == candidate[n]).tolist()
    return {"assignment": canonical(candidate), "joined": joined, "objective": value}
