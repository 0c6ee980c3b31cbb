"""Dispatcher guidance grounded in dispatch protocols (``judgment.protocols``): the plan and the prompt the LLM
is served and trained with, the read-out constraint, and the guard that holds the streamed text to the
protocol. No Django, no torch."""
