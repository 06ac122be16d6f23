"""AdaServe: SLO-customized LLM serving with fine-grained speculative decoding (seed 002)."""

__version__ = "0.1.0"
