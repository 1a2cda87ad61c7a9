"""Launch commands: run an experiment locally, under torchrun, or as a SLURM job."""

from toolbox.core.errors import ToolboxError


class LaunchError(ToolboxError):
    """A launched run failed (a worker or a SLURM job exited non-zero); ``exit_code`` says how."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
