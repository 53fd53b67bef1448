"""The machinery: the core a client and an engine share, the dispatcher and the executor."""
