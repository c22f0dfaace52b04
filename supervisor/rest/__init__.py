"""The REST client layer: the one retry executor, the HTTP request pipeline, the token caches.

It sits between the boundary (supervisor/boundary.py: session context and raw-error
mappers) and the transports, which use it for every REST call and every in-band socket
request (docs/runtime.md, "Floors").
"""
