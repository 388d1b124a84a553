"""FedCollab lives in :mod:`pflax.fedcollab` (it is a structure around any algorithm, not a round
rule); this module re-exports it beside the other algorithms."""
from ..fedcollab import *  # noqa: F401,F403
from ..fedcollab import __all__  # noqa: F401
