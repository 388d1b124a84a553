"""Local-only: every client trains its own full model and nothing is ever communicated.

One "round": each participant runs ``local_epochs`` (E = 5) epochs of full-model SGD on its own data,
from where its own model stopped, with a fresh optimiser (FedPAC's common setting); the server does
nothing. Evaluation: each client's own model on its own test split. All clients start from the
*same* random initialisation (as every FedPAC baseline); the server's tree is empty.
"""
from __future__ import annotations

import dataclasses

from ..core.federated import State, sample_clients
from . import sharing

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(sharing.Config):
    """Nothing shared: every part stays with its client."""

    shared: tuple = ()


ALGORITHM = sharing.preset("local_only", Config, "Local: every client trains alone, nothing is communicated")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
