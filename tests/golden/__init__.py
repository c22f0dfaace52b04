"""Golden files of the wire formats and the example table they are rendered from."""
