"""The process-wide torch settings both sides of a benchmark run under, applied before each side's
round and checked after it (a side that changed one of them makes the comparison unfair: it fails)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TorchSettings:
    """Intra-op threads, deterministic kernels and the NaN fill of ``torch.empty`` that
    ``use_deterministic_algorithms`` adds, grad mode and the default float dtype."""

    threads: int = 1
    deterministic: bool = True
    fill_uninitialized_memory: bool = False
    grad_enabled: bool = True
    dtype: str = "float32"

    def apply(self) -> None:
        import torch
        import torch.utils.deterministic

        torch.set_num_threads(self.threads)
        torch.use_deterministic_algorithms(self.deterministic, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = self.fill_uninitialized_memory
        torch.set_grad_enabled(self.grad_enabled)
        torch.set_default_dtype(getattr(torch, self.dtype))

    @staticmethod
    def live() -> TorchSettings:
        """The settings the process has now."""
        import torch
        import torch.utils.deterministic

        return TorchSettings(
            threads=torch.get_num_threads(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            fill_uninitialized_memory=bool(torch.utils.deterministic.fill_uninitialized_memory),
            grad_enabled=torch.is_grad_enabled(),
            dtype=str(torch.get_default_dtype()).removeprefix("torch."),
        )

    def check(self, side: str) -> None:
        """Fail when ``side`` left the process with other settings than the benchmark's."""
        live = TorchSettings.live()
        if live != self:
            changed = {k: (v, getattr(live, k)) for k, v in asdict(self).items() if getattr(live, k) != v}
            raise RuntimeError(
                f"{side} changed the process-wide torch settings {changed} (wanted, found): the sides "
                "would not run under the same settings; pass the benchmark's settings to that side."
            )

    def overrides(self) -> list[str]:
        """The toolbox config overrides that keep our builder on these settings."""
        return [f"deterministic={str(self.deterministic).lower()}", f"num_threads={self.threads}"]

    def as_json(self) -> dict:
        return asdict(self)
