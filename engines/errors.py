"""Moved to :mod:`core.errors` (the hierarchy is no engine's: auth and config raise from it too).

Only kept while work begun before the move still imports it from here; import from ``core.errors``.
"""

from core.errors import *  # noqa: F403
from core.errors import __all__  # noqa: F401
