"""The routing policy: which engine variant serves each request, by its SLO and the variants' live load.

Pure Python (no Ray, no HTTP): the ingress calls :func:`route` per request and feeds each variant's
:class:`LatencyModel` the timings of finished requests; the bench and the simulator call the same code.
"""

from router.config import LatencyProfile, RouterConfig, SLOTier
from router.headers import features_from_headers
from router.latency import LatencyModel, Load
from router.policy import route
from router.types import SLO, Decision, Prediction, Reason, RequestFeatures, RouterState, VariantView

__all__ = [
    "SLO",
    "Decision",
    "LatencyModel",
    "LatencyProfile",
    "Load",
    "Prediction",
    "Reason",
    "RequestFeatures",
    "RouterConfig",
    "RouterState",
    "SLOTier",
    "VariantView",
    "features_from_headers",
    "route",
]
