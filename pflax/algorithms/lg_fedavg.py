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

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("lg_fedavg", "LG-FedAvg: personal body, shared head", shared=("head",))
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
