"""Shared primitives: split, optimisers, local training, statistics, aggregation, QP, execution, random draws."""
from . import aggregate, execution, losses, optim, qp, rng, split, stats, train
from .execution import Execution, map_clients

__all__ = ["aggregate", "execution", "losses", "optim", "qp", "rng", "split", "stats", "train", "Execution", "map_clients"]
