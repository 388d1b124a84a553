"""Benchmark suites: the data setups of the papers pflax reproduces, as pure, seeded functions.

* :mod:`pflax.suites.fedpac`: FedPAC's partitions for its main and supplementary tables (Xu et al., ICLR 2023).
* :mod:`pflax.suites.fedcollab`: FedCollab's label-, feature- and concept-shift federations (Bao et al., ICML 2023).
"""
