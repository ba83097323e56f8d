"""The webhook retry schedule's defaults, apart from :mod:`plait.domain.webhooks` so the
settings can name them without loading the webhooks' domain types."""

from __future__ import annotations

__all__ = ["PAUSE_AFTER", "RETRY_SECONDS"]

RETRY_SECONDS = (5.0, 30.0, 120.0, 600.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 12 * 3600.0)
"""Wait after the n-th failed attempt (before jitter); after the last one the delivery is
``failed`` (about 22 hours after the event, 9 attempts)."""

PAUSE_AFTER = 20
"""Consecutive failed attempts (any delivery) after which an endpoint is ``paused``."""
