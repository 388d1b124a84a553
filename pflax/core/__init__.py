"""Shared primitives: split, optimisers, local training, statistics, aggregation, QP, execution."""
from . import aggregate, execution, losses, optim, qp, split, stats, train
from .execution import Execution, map_clients

__all__ = ["aggregate", "execution", "losses", "optim", "qp", "split", "stats", "train", "Execution", "map_clients"]
