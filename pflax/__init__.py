"""pflax: pure-functional JAX personalized federated learning.

    import pflax
    state = pflax.fedpac.init(key, model, sample_x, num_clients=20)
    state, metrics = pflax.fedpac.round(state, batch)
"""
from . import core, data, metrics, models
from .algorithms import (REGISTRY, apfl, cfl, ditto, fedavg, fedavg_ft, fedbabu, fedbn, fedcollab, fedem, fedfomo, fednova, fedpac,
                         fedper, fedpick, fedprox, fedproto, fedrep, fedrod, fesem, hypcluster, ifca, knnper, leafwise, lg_fedavg,
                         local_only, perfedavg, pfedhn, pfedme, scaffold)
from .core.execution import Execution

__version__ = "0.1.0"
__all__ = [
    "core", "data", "metrics", "models", "REGISTRY", "Execution", "fedpac", "fedcollab",
    # baselines, one module each (FedPAC's Section 5 baselines and FedCollab's)
    "apfl", "ditto", "fedavg", "fedavg_ft", "fedbabu", "fednova", "fedper", "fedprox", "fedrep", "fedrod", "knnper",
    "lg_fedavg", "local_only", "pfedme", "scaffold",
    "cfl", "fedem", "fedfomo", "fedproto", "fesem", "hypcluster", "ifca", "perfedavg", "pfedhn",
    # BatchNorm backbones: FedBN, FedPick, and the leaf-level sharing rules they are built on
    "fedbn", "fedpick", "leafwise",
]
