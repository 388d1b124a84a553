"""FedCollab (Bao et al., ICML 2023): optimal collaboration structures from estimated distribution
distances and client quantities. ``distance`` estimates D_hat, ``solver`` picks coalitions,
``coalitions`` trains any pflax algorithm inside them, ``setups`` builds the paper's data, ``plots``
draws the distance matrix."""
from .coalitions import assign_new_client, train_coalitions
from .distance import DiscConfig, Discriminator, disc_splits, estimate_distances, pair_list
from .setups import CLUSTER4_025, fmnist_label_shift, label_shift_partition, permute_labels, quantity_factors, rotate_symmetric
from .solver import ablate, all_partitions, canonical, coalitions_of, objective, objectives, solve

__all__ = [
    "assign_new_client", "train_coalitions", "DiscConfig", "Discriminator", "disc_splits", "estimate_distances",
    "pair_list", "CLUSTER4_025", "fmnist_label_shift", "label_shift_partition", "permute_labels",
    "quantity_factors", "rotate_symmetric", "ablate", "all_partitions", "canonical", "coalitions_of", "objective",
    "objectives", "solve",
]
