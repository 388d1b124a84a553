"""kNN-Per (Marfoq et al., 2022): FedAvg plus a local kNN memory interpolated at test time.

Training is exactly FedAvg. At evaluation each client builds a datastore of the global body's
features of its own training samples and, for a test sample with feature ``z``, predicts

    p(y | x) = knn_lam * p_kNN(y | z) + (1 - knn_lam) * softmax(model(x))_y,

where ``p_kNN`` puts on each of the ``knn_k`` nearest training features (squared Euclidean distance)
the weight ``exp(-dist / (d * knn_scale))``, normalised, and sums them per label (``d`` = feature
dimension); see :func:`pflax.algorithms.sharing.knn_probabilities`.

Deliberate choices: ``knn_k = 5`` and ``knn_scale = 1`` as FL-bench; ``knn_lam = 0.5`` (FedPAC tuned
it over {0.5, 0.6, 0.7, 0.8} without reporting the choice). Padding samples never enter the datastore
(their distance is +inf); a client with fewer than ``k`` real training samples uses all of them.
Weights are computed relative to the nearest neighbour, which leaves the normalised weights
unchanged and cannot underflow to 0/0. ``evaluate`` needs the clients' training data.
"""

from . import sharing
from .sharing import State, sample_clients  # noqa: F401 (part of the API)
from .sharing import knn_probabilities  # noqa: F401 (part of the API)

ALGORITHM = sharing.preset("knnper", "kNN-Per: FedAvg interpolated with a kNN over local features", knn_lam=0.5)
Config, init, round, evaluate = ALGORITHM.Config, ALGORITHM.init, ALGORITHM.round, ALGORITHM.evaluate  # noqa: A001
check_inputs = ALGORITHM.check_inputs
