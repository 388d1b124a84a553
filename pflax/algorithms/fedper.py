"""FedPer (Arivazhagan et al., 2019): shared body, personal head.

One round, for the participants: each one assembles the global body with its own head, trains body
and head *jointly* for ``local_epochs`` (E = 5) epochs with a fresh SGD (FedPAC's common setting, as
C-PAC's ``methods/fedper.py``), and uploads its body. The server replaces the global body by the
sample-size weighted mean of the participants' bodies. Heads are never averaged: each participant
keeps the head it trained; non-participants keep theirs. Evaluation: global body + the client's own
head, on the client's own test split. All clients start from the same random initialisation.
"""
from __future__ import annotations

import dataclasses

from ..core.federated import State, sample_clients
from . import sharing

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(sharing.Config):
    """The body is shared and averaged; the head stays with its client."""

    shared: tuple = ("body",)


ALGORITHM = sharing.preset("fedper", Config, "FedPer: shared body, personal head, trained jointly")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
