"""Every pflax algorithm, one module each, and ``REGISTRY``: name -> :class:`pflax.core.federated.Algorithm`.

Every entry keeps one contract: ``Config``, ``init(key, model, sample_x, num_clients, config)``,
``round(state, batch, test=None) -> (state, metrics)`` and ``evaluate(state, test, train=None)``, with a
round made of three pure pieces (:mod:`pflax.core.federated`).

>>> from pflax.algorithms import REGISTRY
>>> REGISTRY["fedavg"].name, REGISTRY["fedavg_ft"].needs_train
('fedavg', True)
"""
from . import (apfl, cfl, ditto, fedavg, fedavg_ft, fedbabu, fedbn, fedem, fedfomo, fednova, fedpac, fedper, fedpick,
               fedprox, fedproto, fedrep, fedrod, fesem, hypcluster, ifca, knnper, leafwise, lg_fedavg, local_only,
               perfedavg, pfedhn, pfedme, scaffold, sharing)

_MODULES = (
    fedpac, local_only, fedavg, fedavg_ft, fedper, lg_fedavg, fedrep, fedbabu, fedprox, ditto, apfl, scaffold, fedrod,
    knnper, pfedme, fednova, fedproto, ifca, hypcluster, fedem, perfedavg, fedfomo, fesem, cfl, pfedhn,
    # BatchNorm backbones (pflax.models.bn): the leaf-level sharing rule, see leafwise.py
    fedbn, fedpick,
)
REGISTRY = {getattr(m, "ALGORITHM", m).name if hasattr(m, "ALGORITHM") else m.__name__.rsplit(".", 1)[-1]:
            getattr(m, "ALGORITHM", m) for m in _MODULES}
