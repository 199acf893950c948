"""Property decisions: the decision engine, the batch pipeline and the HTTP service."""
