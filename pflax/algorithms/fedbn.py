"""FedBN (Li et al., "FedBN: Federated Learning on Non-IID Features via Local Batch Normalization",
ICLR 2021, Algorithm 1; https://github.com/med-air/FedBN): FedAvg of every parameter except
BatchNorm's.

BN affine parameters (scale, bias) and running statistics stay with their client and are never
averaged (the official ``communication`` skips every ``bn`` key); everything else is the sample-size
weighted mean over participants, as in FedAvg. It is FedPick's "w/o PFSM" ablation and its closest
baseline (Zhu et al., arXiv:2307.13995, Tables II and IV). FedBN is a preset of the leaf-level
sharing rule (:mod:`pflax.algorithms.leafwise`, ``leafwise.rule("fedbn")``); the setting is
FedPick's (SGD lr 0.01, momentum 0.5, no weight decay, batch 64, 1 local epoch). Needs a model with
BN (:mod:`pflax.models.bn`). Evaluation: the averaged layers with the client's own BN layers, on the
client's own test split.

>>> from pflax.algorithms import fedbn
>>> fedbn.Config().sharing.parts, fedbn.Config().sharing.bn
(('body', 'head'), False)
"""
from __future__ import annotations

import dataclasses

from ..core.federated import State, sample_clients
from . import leafwise
from .leafwise import Sharing

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs"]


@dataclasses.dataclass(frozen=True)
class Config(leafwise.Config):
    """FedPick's SGD setting; the sharing rule is "everything but BN".

    Attributes:
      sharing: body and head averaged, BatchNorm leaves local (``leafwise.rule("fedbn")``).
      (and :class:`pflax.algorithms.leafwise.TrainingConfig`'s fields: lr 0.01, momentum 0.5, batch 64, ...)

    >>> Config().batch_size, Config().sharing == Sharing(("body", "head"), bn=False)
    (64, True)
    """

    sharing: Sharing = leafwise.RULES["fedbn"]["sharing"]


ALGORITHM = leafwise.preset("fedbn", Config, "FedBN (BN models only): everything but BatchNorm averaged")
init, round, evaluate, check_inputs = ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs
