"""One module per training stack; each exposes `run(spec, recorder)`."""
