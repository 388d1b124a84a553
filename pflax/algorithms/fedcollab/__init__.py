"""FedCollab (Bao, Wang, Wu and He, "Optimizing the Collaboration Structure in Cross-Silo Federated
Learning", ICML 2023, arXiv:2306.06508; official code https://github.com/baowenxuan/FedCollab).

FedCollab is a structure around any algorithm, not a round rule: it estimates pairwise distribution
distances D_hat (:mod:`.distance`), picks non-overlapping coalitions that minimise the bound of the
paper's Section 4 from D_hat and the clients' quantities (:mod:`.solver`), then trains any registry
algorithm inside each coalition (:mod:`.coalitions`); :mod:`.plots` draws the distance matrix. The
paper's data setups are a benchmark suite, :mod:`pflax.suites.fedcollab`.
"""
from .coalitions import assign_new_client, train_coalitions
from .distance import DiscConfig, Discriminator, disc_splits, estimate_distances, pair_list
from .solver import ablate, all_partitions, canonical, coalitions_of, objective, objectives, solve

__all__ = [
    "assign_new_client", "train_coalitions", "DiscConfig", "Discriminator", "disc_splits", "estimate_distances",
    "pair_list", "ablate", "all_partitions", "canonical", "coalitions_of", "objective", "objectives", "solve",
]
