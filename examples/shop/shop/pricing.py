"""Prices with tax."""


def add_tax(amount: float, rate: float) -> float:
    """Return ``amount`` with ``rate`` percent of tax added."""
    return round(amount * rate, 2)
