"""Diagnosis: why a run is slow (device busy/idle, classified gaps, steps, verdict, advice).

A pure stage over the trace model; the result is plain data (:mod:`.model`).
"""

from __future__ import annotations

from .model import BOUND_BY, DIAGNOSIS_SCHEMA_VERSION, GAP_CLASSES, Diagnosis, Finding, Gap, Gaps, Step, Steps, Timeline

__all__ = [
    "BOUND_BY",
    "DIAGNOSIS_SCHEMA_VERSION",
    "GAP_CLASSES",
    "Diagnosis",
    "Finding",
    "Gap",
    "Gaps",
    "Step",
    "Steps",
    "Timeline",
]
