"""pytest-sdbench: a native forward-pass profile of EAGLE3 speculative decoding in vLLM."""

__version__ = "0.1.0"
