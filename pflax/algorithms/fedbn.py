"""FedBN (Li et al., 2021): FedAvg of every parameter except BatchNorm's.

BN affine parameters (scale, bias) and running statistics stay with their client and are never
averaged; everything else is the sample-size weighted mean over participants, as in FedAvg. It is
FedPick's "w/o PFSM" ablation and its closest baseline (spec C.4, D). The rule is
:func:`pflax.algorithms.leafwise.fedbn`; the setting is FedPick's (SGD lr 0.01, momentum 0.5, no
weight decay, batch 64, 1 local epoch). Needs a model with BN (:mod:`pflax.models.bn`).
Evaluation: the averaged layers with the client's own BN layers, on the client's own test split.
"""
from __future__ import annotations

import dataclasses

from . import leafwise
from .leafwise import Sharing, State, check_inputs, evaluate, round, sample_clients  # noqa: F401

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(leafwise.Config):
    """FedPick's SGD setting; the sharing rule is fixed to "everything but BN"."""

    sharing: Sharing = Sharing(("encoder", "head"), bn=False)


def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return leafwise.init(key, model, sample_x, num_clients, config)
