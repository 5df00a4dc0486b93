"""How programs print as Python, per backend, and how printed code is compiled."""
