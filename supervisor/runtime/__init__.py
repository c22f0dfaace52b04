"""The runtime: executes the machines' effects over real transports under one anyio task group."""
