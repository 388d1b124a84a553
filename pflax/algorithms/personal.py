"""A global model averaged by the server plus a personal model kept by each client: one rule, and
Ditto, APFL and pFedMe as instances of it.

State: ``server`` is the global model ``w``; ``clients`` holds every client's personal model (Ditto's
``v_i``, APFL's ``v_i``, pFedMe's ``theta_i``); all start from the same random initialisation. One
round, for the participants:

1. every participant receives ``w^t`` and runs the algorithm's ``local_update(w^t, participant,
   model, config) -> (w_i, personal_i, metrics)``: its copy of the global model, its new personal
   model and per-participant metrics;
2. the server takes the sample-size weighted mean of the ``w_i`` (the old ``w^t`` when no participant
   has data) and, when the algorithm has one, applies ``server_step(w^t, mean, config)`` (pFedMe's
   ``beta``-mixing);
3. each participant keeps ``personal_i``; non-participants keep theirs.

Evaluation scores ``personalized(personal_i, w, config)`` (the personal model itself, or APFL's mixture)
on each client's own test split, with the model itself or, when the algorithm gives one, its
``scoring_model`` (APFL's mixture of the two models' outputs).

>>> import jax, pflax
>>> train, test = pflax.data.toy_federation()
>>> cfg = pflax.ditto.Config(local_epochs=1, personal_epochs=1)
>>> state = pflax.ditto.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2, cfg)
>>> state, metrics = pflax.ditto.round(state, train, test)
>>> sorted(metrics)[:3], metrics["accuracy"].shape
(['accuracy', 'client_ids', 'loss'], (2,))
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import jax

from ..core import federated
from ..core.federated import State
from . import base
from .common import init_on_execution_devices

Array = jax.Array
PyTree = Any

__all__ = ["algorithm", "own_model"]

LocalUpdate = Callable[[PyTree, dict, Any, Any], tuple[PyTree, PyTree, dict]]


def own_model(personal: PyTree, server: PyTree, cfg) -> PyTree:
    """The default ``personalized``: a client is scored with its personal model alone (Ditto, pFedMe).

    Args:
      personal: the client's personal model.
      server: the global model (unused).
      cfg: the config (unused).
    Returns:
      ``personal``.

    >>> own_model({"w": 1.0}, {"w": 2.0}, None)
    {'w': 1.0}
    """
    return personal


def algorithm(name: str, Config: type, local_update: LocalUpdate, summary: str,
              personalized: Callable[[PyTree, PyTree, Any], PyTree] = own_model,
              server_step: Optional[Callable[[PyTree, PyTree, Any], PyTree]] = None,
              scoring_model: Optional[Callable[[Any, Any], Any]] = None) -> federated.Algorithm:
    """The registry entry of one global + personal algorithm (module docstring).

    Args:
      name: the registry name.
      Config: its hyper-parameters (a :class:`pflax.algorithms.base.SGDConfig`); ``Config()`` is the default.
      local_update: ``(w, participant, model, config) -> (w_i, personal_i, metrics)``; ``participant``
        holds ``x``, ``y``, ``mask``, ``key`` and ``client`` (its personal model), see
        :class:`pflax.core.federated.RoundPieces`. ``metrics`` are per participant (``n``, ``loss``, ...).
      summary: one line for ``pflax list``.
      personalized: ``(personal_i, w, config) -> model`` scored by ``evaluate``; default: ``personal_i``.
      server_step: ``(w^t, mean, config) -> w^{t+1}``; default: the mean itself.
      scoring_model: ``(model, config) -> model`` whose ``apply`` scores what ``personalized`` returns
        (APFL's mixture of outputs); default: the model itself.

    Returns:
      A :class:`pflax.core.federated.Algorithm` whose ``init``, ``round`` and ``evaluate`` are the module's.

    >>> def unchanged(w, participant, model, cfg):  # no training: both models come back as received
    ...     return w, participant["client"], {"n": base.num_samples(participant)}
    >>> entry = algorithm("noop", base.SGDConfig, unchanged, "trains nothing")
    >>> entry.name, entry.Config().lr, entry.summary
    ('noop', 0.01, 'trains nothing')
    """

    @init_on_execution_devices
    def init(key, model, sample_x, num_clients: int, config=None) -> State:
        config = Config() if config is None else config
        return State.from_model(key, model, sample_x, num_clients, config, lambda params: (params, params))

    init.__doc__ = (f"{name}'s ``init(key, model, sample_x, num_clients, config=Config())``: ``server`` = the "
                    "global model, ``clients`` = every client's personal model, both the same random model "
                    "(from the first of ``split(key, 3)``).")

    def pieces(model, cfg) -> federated.RoundPieces:
        def local(w, participant):
            new_w, personal_model, metrics = local_update(w, participant, model, cfg)
            return {"mean": new_w, "client": personal_model, **metrics}

        def server_update(state, batch, uploads, reduced):
            mean = federated.mean_or(reduced, state.server)
            server = mean if server_step is None else server_step(state.server, mean, state.config)
            return server, None, {k: v for k, v in uploads.items() if k != "client"}

        return federated.RoundPieces(broadcast=federated.no_broadcast, local_update=local, server_update=server_update)

    def score(c, w, model, cfg):
        scorer = model if scoring_model is None else scoring_model(model, cfg)
        return base.accuracy_of(scorer, personalized(c["client"], w, cfg), c)

    return federated.build(name, Config, init, pieces, score, summary, base.check_inputs)
