"""FedPer (Arivazhagan et al., 2019): shared body, personal head.

One round, for the participants: each one assembles the global body with its own head, trains body
and head *jointly* for ``local_epochs`` (E = 5) epochs with a fresh SGD (FedPAC's common setting, as
C-PAC's ``methods/fedper.py``), and uploads its body. The server replaces the global body by the
sample-size weighted mean of the participants' bodies. Heads are never averaged: each participant
keeps the head it trained; non-participants keep theirs. Evaluation: global body + the client's own
head, on the client's own test split. All clients start from the same random initialisation.
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("fedper", "FedPer: shared body, personal head, trained jointly", shared=("body",))
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
