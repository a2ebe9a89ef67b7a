"""Model presets and engine start-up; the only package that knows vLLM's internals."""
