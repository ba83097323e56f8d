"""The surfaces people and programs use: the ``plait`` command and the HTTP API. They sit
above :mod:`plait.runtime` and nothing below imports them."""
