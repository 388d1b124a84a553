"""FedRep (Collins et al., 2021): shared body (representation), personal head, trained alternately.

One round, for the participants: each one assembles the global body with its own head, then

1. trains the head for ``head_epochs`` epochs with the body frozen (fresh SGD),
2. trains the body for ``local_epochs`` epochs with the head frozen (another fresh SGD),

and uploads its body. The server replaces the global body by the sample-size weighted mean of the
participants' bodies; heads are never averaged.

Deliberate choices: defaults follow the original paper, 10 head epochs then 1 body epoch (FL-bench's
``train_body_epoch`` is also 1; FedPick used 4 + 1); both phases use FedPAC's common SGD setting (lr
0.01, momentum 0.5, wd 5e-4, batch 50). Freezing is by masked optimiser updates, so the frozen part
gets neither weight decay nor momentum. Evaluation: global body + the client's own head.
"""
from __future__ import annotations

import dataclasses

from ..core.federated import State, sample_clients
from . import sharing

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(sharing.Config):
    """FedPer's sharing, trained head first: ``head_epochs`` head epochs, then ``local_epochs`` body epochs."""

    shared: tuple = ("body",)
    alternating: bool = True
    head_epochs: int = 10
    local_epochs: int = 1


ALGORITHM = sharing.preset("fedrep", Config, "FedRep: shared body, personal head, head epochs then body epochs")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
