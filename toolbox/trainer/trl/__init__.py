"""TRL as an alternative trainer backend: ``trl_sft``, ``trl_dpo`` and ``trl_grpo`` behind our trainer
interface, and the bridge that hands them our model, data and reward."""
