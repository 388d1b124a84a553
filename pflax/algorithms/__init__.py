"""One module per algorithm, each with ``Config``, ``State``, ``init``, ``round``, ``evaluate``,
``sample_clients`` and ``check_inputs``.

``REGISTRY`` maps a name to its module. Most modules' ``evaluate(state, test)`` scores each client's
personalized model; those in ``EVALUATE_NEEDS_TRAIN`` personalise at evaluation time (fine-tuning or a
kNN datastore) and take ``evaluate(state, test, train)``.
"""
from . import (apfl, cfl, ditto, fedavg, fedavg_ft, fedbabu, fedbn, fedem, fedfomo, fednova, fedpac, fedper, fedpick,
               fedprox, fedproto, fedrep, fedrod, fesem, hypcluster, ifca, knnper, leafwise, lg_fedavg, local_only,
               perfedavg, pfedhn, pfedme, scaffold)

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
    "fedproto": fedproto,
    "ifca": ifca,
    "hypcluster": hypcluster,
    "fedem": fedem,
    "perfedavg": perfedavg,
    "fedfomo": fedfomo,
    "fesem": fesem,
    "cfl": cfl,
    "pfedhn": pfedhn,
    # BatchNorm backbones (pflax.models.bn): leaf-level sharing, see leafwise.py
    "fedbn": fedbn,
    "fedpick": fedpick,
}
EVALUATE_NEEDS_TRAIN = frozenset({"fedavg_ft", "fedbabu", "knnper", "perfedavg"})
