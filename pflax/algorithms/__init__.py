"""Every pflax algorithm, one module each, and ``REGISTRY``: name -> :class:`pflax.core.federated.Algorithm`.

Every entry keeps one contract: ``Config``, ``init(key, model, sample_x, num_clients, config)``,
``round(state, batch, test=None) -> (state, metrics)`` and ``evaluate(state, test, train=None)``, with a
round made of three pure pieces (:mod:`pflax.core.federated`). Families share one rule:
:mod:`.sharing` (Local, FedAvg, FedAvg-FT, FedPer, LG-FedAvg, FedRep, FedBABU, FedProx, kNN-Per),
:mod:`.personal` (Ditto, APFL, pFedMe), :mod:`.clustered` (IFCA, HypCluster, FeSEM, CFL, FedEM) and
:mod:`.leafwise` (FedBN and FedPick's BatchNorm backbones).

>>> from pflax.algorithms import REGISTRY
>>> REGISTRY["fedavg"].name, REGISTRY["fedavg_ft"].needs_train
('fedavg', True)
"""
from . import (apfl, cfl, ditto, fedavg, fedavg_ft, fedbabu, fedbn, fedem, fedfomo, fednova, fedpac, fedper, fedpick,
               fedprox, fedproto, fedrep, fedrod, fesem, hypcluster, ifca, knnper, lg_fedavg, local_only, perfedavg,
               pfedhn, pfedme, scaffold)

_MODULES = (
    fedpac, local_only, fedavg, fedavg_ft, fedper, lg_fedavg, fedrep, fedbabu, fedprox, ditto, apfl, scaffold, fedrod,
    knnper, pfedme, fednova, fedproto, ifca, hypcluster, fedem, perfedavg, fedfomo, fesem, cfl, pfedhn,
    fedbn, fedpick,  # BatchNorm backbones (pflax.models.bn)
)
REGISTRY = {m.ALGORITHM.name: m.ALGORITHM for m in _MODULES}
