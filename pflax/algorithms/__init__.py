"""One module per algorithm, each with ``Config``, ``State``, ``init``, ``round``, ``evaluate``,
``sample_clients`` and ``check_inputs``.

``REGISTRY`` maps a name to its module. Most modules' ``evaluate(state, test)`` scores each client's
personalized model; those in ``EVALUATE_NEEDS_TRAIN`` personalise at evaluation time (fine-tuning or a
kNN datastore) and take ``evaluate(state, test, train)``.
"""
from . import (apfl, ditto, fedavg, fedavg_ft, fedbabu, fednova, fedpac, fedper, fedprox, fedrep, fedrod, knnper,
               lg_fedavg, local_only, pfedme, scaffold)

REGISTRY = {
    "fedpac": fedpac,
    "local_only": local_only,
    "fedavg": fedavg,
    "fedavg_ft": fedavg_ft,
    "fedper": fedper,
    "lg_fedavg": lg_fedavg,
    "fedrep": fedrep,
    "fedbabu": fedbabu,
    "fedprox": fedprox,
    "ditto": ditto,
    "apfl": apfl,
    "scaffold": scaffold,
    "fedrod": fedrod,
    "knnper": knnper,
    "pfedme": pfedme,
    "fednova": fednova,
}
EVALUATE_NEEDS_TRAIN = frozenset({"fedavg_ft", "fedbabu", "knnper"})
