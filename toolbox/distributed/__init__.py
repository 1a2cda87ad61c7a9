"""Distribution strategies: single process, DDP, FSDP."""
