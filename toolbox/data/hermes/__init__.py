"""The Hermes tool-call format (``<tool_call>{...}</tool_call>``), shared by data sets, evaluators and the
server: rendering and parsing whole texts (``calls``) and parsing a text as it streams (``stream``)."""
