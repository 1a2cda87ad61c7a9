"""Exceptions with messages meant for the person running toolbox.

Every error a user can cause (a bad config, a missing file, an unknown name) is one of these, and
its message names the problem and the fix. The CLI prints them without a traceback.
"""

from __future__ import annotations


class ToolboxError(Exception):
    """Base class: an error whose message is written for the user."""


class ConfigError(ToolboxError):
    """A config key, value or type is wrong; the message names the key path."""


class UnknownComponentError(ConfigError):
    """A config selects a component name that no registry knows."""


class DataError(ToolboxError):
    """A data file is missing or malformed."""


class CheckpointError(ToolboxError):
    """No usable checkpoint could be loaded."""


class TrainingInterrupted(ToolboxError):
    """SIGINT or SIGTERM stopped a training after it checkpointed its current step.

    ``exit_code`` is the shell's for that signal (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class OutputError(ToolboxError):
    """An output could not be written: a read-only folder, a full disk, a file in the way."""
