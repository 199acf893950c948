"""The HTTP decision service: POST /v1/decisions over the engine, the ledger and the accounts.

`app.create_app` builds it, `server.serve` runs it. Nothing is imported here, so that the
command line can read `limits` without loading the web framework.
"""
