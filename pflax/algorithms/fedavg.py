"""FedAvg (McMahan et al., 2017, Algorithm 1): the non-personalized baseline.

One round, for the participants: each starts from the global model, runs ``local_epochs`` epochs of
minibatch SGD on the whole model with a fresh optimiser (FedPAC's common setting: lr 0.01, momentum
0.5, weight decay 5e-4, batch 50, E = 5), and the server replaces the global model by the
sample-size weighted mean of the participants' models. Evaluation: the global model on each
client's test split. FedAvg is the sharing rule with everything shared and averaged
(:mod:`pflax.algorithms.sharing`).

>>> import jax
>>> from pflax.algorithms import fedavg
>>> from pflax.data import from_partition, synthetic
>>> from pflax.models import mlp
>>> ds = synthetic(train_per_class=8, test_per_class=4, image_size=8)
>>> train = from_partition(ds.x_train, ds.y_train, [range(0, 40), range(40, 80)])
>>> state = fedavg.init(jax.random.PRNGKey(0), mlp(10, hidden=(8,)), train.x[0], 2, fedavg.Config(local_epochs=1))
>>> state, metrics = fedavg.round(state, train)
>>> int(state.round), metrics["loss"].shape
(1, (2,))
"""
from __future__ import annotations

import dataclasses

from ..core.federated import State, sample_clients
from . import sharing

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(sharing.Config):
    """FedAvg: the sharing rule's defaults (everything shared and averaged, no personalisation)."""


ALGORITHM = sharing.preset("fedavg", Config, "FedAvg: one global model, sample-size weighted mean of local SGD")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
