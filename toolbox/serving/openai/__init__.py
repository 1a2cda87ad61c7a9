"""``toolbox serve``: the OpenAI-compatible HTTP server (app, request and response, errors, metrics,
OpenAPI document, body limit, command line) in front of any inference engine."""
