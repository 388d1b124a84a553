"""FedProx (Li et al., 2020): FedAvg with a proximal term in the local objective.

One round, for the participants: each one starts from the global model ``w^t`` and runs
``local_epochs`` (E = 5) epochs of SGD (fresh optimiser, FedPAC's common setting) on

    CE(w) + (prox_mu / 2) * ||w - w^t||^2        (every parameter, body and head),

then the server takes the sample-size weighted mean of the participants' models, as FedAvg.

Deliberate choices: ``prox_mu`` defaults to 0.01, FedPick's value (FedPAC does not give it;
FedCollab's default is 0.1 and FL-bench's 1.0). Weight decay is kept on top of the proximal term (the
common setting). Partial work (FedProx's variable local steps) is not simulated: every participant
runs its full epochs.
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("fedprox", "FedProx: FedAvg with a proximal term to the global model", prox_mu=0.01)
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
