"""``toolbox bench serve``: the load generator, its prompts, its command line and report, and vLLM's own
benchmark run from Python."""
