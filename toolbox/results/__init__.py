"""Results a run declares and a reader sees: expectations checked against eval JSON (expect), the
tables generated from those files (report), and what a rerun of the workflow will recompute (plan)."""
