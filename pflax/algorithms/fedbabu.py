"""FedBABU (Oh et al., 2022): train and share only the body; the head stays at its random init.

One round, for the participants: each one trains the body for ``local_epochs`` (E = 5) epochs with
the head frozen (fresh SGD, FedPAC's common setting), and the server replaces the global body by the
sample-size weighted mean of the participants' bodies. The head is shared and never updated, nor
averaged: it stays bit-for-bit at its initialisation during training.

Evaluation (the personalisation): every evaluated client fine-tunes a copy of (global body,
initial head) on its own training split for ``finetune_epochs`` epochs and is scored on its own test
split; the copies are thrown away.

Deliberate choices: the head is frozen by masked optimiser updates (it gets neither gradient steps
nor weight decay), rather than FL-bench's zeroed gradients, which would still decay it. Fine-tuning
updates the whole model by default (``finetune_parts=("body", "head")``, the original paper's main
setting); ``("head",)`` gives head-only fine-tuning. ``finetune_epochs`` defaults to 5 (the
original uses a few epochs; FedPAC does not state it). Fine-tuning uses a PRNG stream of its own, so
evaluating never changes training. ``evaluate`` therefore needs the clients' training data.
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("fedbabu",
                           "FedBABU: body trained and averaged, random head frozen, fine-tuned at evaluation",
                           averaged=("body",), trained=("body",), finetune_epochs=5)
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
