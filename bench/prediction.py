"""Moved to :mod:`traffic.prediction`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.prediction import (
    PredictionAccuracy,
    RatioStats,
    prediction_accuracy,
    ratio_stats,
)

__all__ = [
    "PredictionAccuracy",
    "RatioStats",
    "prediction_accuracy",
    "ratio_stats",
]
