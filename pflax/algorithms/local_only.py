"""Local-only: every client trains its own full model and nothing is ever communicated.

One "round": each participant runs ``local_epochs`` (E = 5) epochs of full-model SGD on its own data,
from where its own model stopped, with a fresh optimiser (FedPAC's common setting); the server does
nothing. Evaluation: each client's own model on its own test split. All clients start from the
*same* random initialisation (as every FedPAC baseline); the server's tree is empty.
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("local_only", "Local: every client trains alone, nothing is communicated", shared=())
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
