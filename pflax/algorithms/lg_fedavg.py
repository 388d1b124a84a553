"""LG-FedAvg (Liang et al., 2020) as FedPAC ran it: personal body, shared head (the last linear layer).

One round, for the participants: each one assembles its own body with the global head, trains both
*jointly* for ``local_epochs`` (E = 5) epochs with a fresh SGD (FedPAC's common setting), and uploads
its head. The server replaces the global head by the sample-size weighted mean of the participants'
heads. Bodies are never averaged: each participant keeps the body it trained.

Deliberate choices: the shared part is exactly the head and the local part the body, as in C-PAC's
``methods/lg_fedavg.py`` (``w_local_keys = base_weight_keys``); the original paper's FedAvg
pre-training phase is not run (C-PAC does not run it either). All clients start from the same
random initialisation. Evaluation: the client's own body + the global head, on its own test split.
"""
from __future__ import annotations

import dataclasses

from ..core.federated import State, sample_clients
from . import sharing

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(sharing.Config):
    """The head is shared and averaged; the body stays with its client."""

    shared: tuple = ("head",)


ALGORITHM = sharing.preset("lg_fedavg", Config, "LG-FedAvg: personal body, shared head")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
