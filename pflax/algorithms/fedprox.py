"""FedProx (Li et al., 2020): FedAvg with a proximal term in the local objective.

One round, for the participants: each one starts from the global model ``w^t`` and runs
``local_epochs`` (E = 5) epochs of SGD (fresh optimiser, FedPAC's common setting) on

    CE(w) + (prox_mu / 2) * ||w - w^t||^2        (every parameter, body and head),

then the server takes the sample-size weighted mean of the participants' models, as FedAvg.

Deliberate choices: ``prox_mu`` defaults to 0.01, FedPick's value (FedPAC does not give it;
FedCollab's default is 0.1 and FL-bench's 1.0). Weight decay is kept on top of the proximal term (the
common setting). Partial work (FedProx's variable local steps) is not simulated: every participant
runs its full epochs.
"""
from __future__ import annotations

import dataclasses

from ..core.federated import State, sample_clients
from . import sharing

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(sharing.Config):
    """FedAvg with the proximal term ``prox_mu``."""

    prox_mu: float = 0.01


ALGORITHM = sharing.preset("fedprox", Config, "FedProx: FedAvg with a proximal term to the global model")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
