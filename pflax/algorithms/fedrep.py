"""FedRep (Collins et al., 2021): shared body (representation), personal head, trained alternately.

One round, for the participants: each one assembles the global body with its own head, then

1. trains the head for ``head_epochs`` epochs with the body frozen (fresh SGD),
2. trains the body for ``local_epochs`` epochs with the head frozen (another fresh SGD),

and uploads its body. The server replaces the global body by the sample-size weighted mean of the
participants' bodies; heads are never averaged.

Deliberate choices: defaults follow the original paper, 10 head epochs then 1 body epoch (FL-bench's
``train_body_epoch`` is also 1; FedPick used 4 + 1); both phases use FedPAC's common SGD setting (lr
0.01, momentum 0.5, wd 5e-4, batch 50). Freezing is by masked optimiser updates, so the frozen part
gets neither weight decay nor momentum. Evaluation: global body + the client's own head.
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("fedrep", "FedRep: shared body, personal head, head epochs then body epochs",
                           shared=("body",), alternating=True, head_epochs=10, local_epochs=1)
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
