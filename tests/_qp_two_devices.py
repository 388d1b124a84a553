"""Run as a script with 2 forced host devices: FedPAC's QP on participant statistics sharded over both
devices (m = 40), three times; prints the largest deviation of a row sum from 1."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from pflax.algorithms.fedpac import combination
from pflax.core.execution import client_mesh

assert jax.device_count() == 2
sharded = NamedSharding(client_mesh(), PartitionSpec("clients"))
rng = np.random.default_rng(0)
worst = 0.0
for rep in range(3):
    v = jax.device_put(jnp.asarray(rng.uniform(0.1, 1.0, 40), jnp.float32), sharded)
    h = jax.device_put(jnp.asarray(rng.normal(size=(40, 10, 16)), jnp.float32), sharded)
    w = np.asarray(jax.jit(combination.combination_weights)(v, h))
    worst = max(worst, float(np.abs(w.sum(1) - 1.0).max()))
print(worst)
