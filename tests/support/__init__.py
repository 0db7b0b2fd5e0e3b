"""Helpers shared by the tests: settings and store accessors (stores.py), embedders for injected faults and another
model (embedders.py), synthetic conversations (synthetic.py), the tree's invariants (invariants.py). Test modules
import from here, never from a conftest or another test module."""
