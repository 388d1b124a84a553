"""FedAvg (McMahan et al., 2017, Algorithm 1): the non-personalized baseline.

One round, for the participants: each starts from the global model, runs ``local_epochs`` epochs of
minibatch SGD on the whole model with a fresh optimiser (FedPAC's common setting: lr 0.01, momentum
0.5, weight decay 5e-4, batch 50, E = 5), and the server replaces the global model by the
sample-size weighted mean of the participants' models. Evaluation: the global model on each
client's test split. FedAvg is the sharing rule with everything shared and averaged
(:mod:`pflax.algorithms.sharing`).

>>> import jax, pflax
>>> train, _ = pflax.data.toy_federation()
>>> state = pflax.fedavg.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...                           pflax.fedavg.Config(local_epochs=1))
>>> state, metrics = pflax.fedavg.round(state, train)
>>> int(state.round), metrics["loss"].shape
(1, (2,))
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("fedavg", "FedAvg: one global model, sample-size weighted mean of local SGD")
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
