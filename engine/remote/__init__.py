"""Remote backends: the engine seam on an inference server (``llama-server``)."""
