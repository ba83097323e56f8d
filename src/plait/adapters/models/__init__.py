"""Model adapters: OpenAI Chat Completions (and OpenAI-compatible servers), OpenAI
Responses, Anthropic and Gemini, each a pure converter plus a thin client on the official
SDK, which is imported only when a call is made.

Use :func:`open_model` with a spec such as ``openai:gpt-4o`` (see
:data:`MODEL_SPEC_FORMS`)."""

from plait.adapters.models._catalog import CATALOG_DATE, CATALOG_SOURCE, builtin_models
from plait.adapters.models._check import check_model
from plait.adapters.models._spec import MODEL_SPEC_FORMS, ModelSpec, open_model, parse_spec, resolve

__all__ = [
    "CATALOG_DATE",
    "CATALOG_SOURCE",
    "MODEL_SPEC_FORMS",
    "ModelSpec",
    "builtin_models",
    "check_model",
    "open_model",
    "parse_spec",
    "resolve",
]
