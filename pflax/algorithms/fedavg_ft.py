"""FedAvg-FT: FedAvg training, evaluated after local fine-tuning of the whole model.

Training is exactly FedAvg. Evaluation (the personalisation): every evaluated client copies the
*current* global model, fine-tunes the whole model for ``finetune_epochs`` epochs on its own training
split with a fresh SGD of the same setting, and is scored on its own test split. The fine-tuned
copies are thrown away; the state is not changed.

Deliberate choices: FedPAC (Xu et al., 2023) does not state the fine-tuning length; the official
code's ``acc2`` is the accuracy after the 5 local epochs of the round, so the default is
``finetune_epochs = local_epochs = 5``. Fine-tuning starts from the *aggregated* model ``w^{t+1}``
(not the pre-aggregation local model) and uses a PRNG stream of its own, so evaluating never
changes the training trajectory. ``evaluate`` therefore needs the clients' training data.
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset(
    "fedavg_ft", "FedAvg-FT: FedAvg, fine-tuned on each client's data at evaluation", finetune_epochs=5)
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
