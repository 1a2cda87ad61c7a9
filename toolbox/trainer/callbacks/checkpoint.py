"""The checkpoint callback: keeps the last N checkpoints and exports the final model."""

from __future__ import annotations

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.nn.export import export_pretrained
from toolbox.trainer.callbacks.base import Callback


@CALLBACKS.register("checkpoint")
class CheckpointCallback(Callback):
    """Prunes old checkpoints and writes the final model (and tokenizer) with save_pretrained.

    Args:
        keep_last: how many of the newest checkpoints to keep (0 keeps all).
        export_dir: folder, relative to the run dir, for the final model.
    """

    # runs on every rank: under FSDP gathering the full model is a collective; only rank 0 writes
    main_process_only = False

    def __init__(self, keep_last: int = 2, export_dir: str = "model") -> None:
        self.keep_last = keep_last
        self.export_dir = export_dir

    def on_checkpoint_saved(self, data: EventData) -> None:
        if self.keep_last and data.trainer.context.is_main:
            data.trainer.checkpointer.prune(self.keep_last)

    def on_export(self, data: EventData) -> None:
        trainer = data.trainer
        if data.payload.get("resumed") and (trainer.context.run_dir / self.export_dir).is_dir():
            return  # a finished run, resumed: its model is there and stays untouched
        model = trainer.model
        if not hasattr(getattr(model, "module", model), "save_pretrained"):
            return
        # one consolidated model that loads with from_pretrained in a single process
        sharded = getattr(trainer.strategy, "shards_model", False)
        state = trainer.strategy.full_model_state_dict(model) if sharded else None
        if trainer.context.is_main:
            from toolbox.nn.adapters import export_adapted, is_adapted

            if is_adapted(model):  # <run>/adapter, and the merged model (or the adapter) in <run>/model
                merge = bool((trainer.cfg.get("peft") or {}).get("merge_on_export", True))
                export_adapted(model, trainer.tokenizer, trainer.context.run_dir, self.export_dir, merge)
                return
            export_pretrained(model, trainer.tokenizer, trainer.context.run_dir / self.export_dir, state)
