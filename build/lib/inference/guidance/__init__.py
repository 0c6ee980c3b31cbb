"""Dispatcher guidance grounded in dispatch protocols: the protocol library, the prompt the LLM is served and
trained with, and the guard that holds the streamed text to the protocol. No Django, no torch."""
