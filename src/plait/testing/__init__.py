"""Fakes for testing agents built on plait, with no network and no real time.

* :class:`ScriptedModel` replays a script of model turns (``docs/scripted-model.md``);
  :class:`FunctionModel` answers with a function of the request.
* :class:`FixedClock`, :class:`SequentialIds`: deterministic time and ids.
* :class:`RecordingTool`, :func:`echo_tool`: tools that record their invocations.
* :class:`CharMeter`: a predictable token meter (characters / 4).
* :func:`block_network`: make real network access raise (see also
  ``plait.testing.pytest_plugin``).
"""

from plait.testing._script import (
    Script,
    ScriptedCall,
    ScriptedError,
    Turn,
    load_script,
    parse_script,
)
from plait.testing.char_meter import CharMeter
from plait.testing.fakes import FixedClock, RecordingTool, SequentialIds, echo_tool
from plait.testing.function_model import FunctionModel
from plait.testing.network import block_network
from plait.testing.scripted import ScriptedModel

__all__ = [
    "CharMeter",
    "FixedClock",
    "FunctionModel",
    "RecordingTool",
    "Script",
    "ScriptedCall",
    "ScriptedError",
    "ScriptedModel",
    "SequentialIds",
    "Turn",
    "block_network",
    "echo_tool",
    "load_script",
    "parse_script",
]
