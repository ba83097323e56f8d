"""Evaluations anyone can run (``plait eval ...``)."""
