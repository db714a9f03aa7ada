"""Hosts: the trainers strategies run in (`engine`, `trl`, `verl`), what they share at run
time (`common`), and what the harness knows of them (`host`, `registry`).

Each folder's ``host.py`` is what ``compare`` needs of that host; it imports no framework.
"""
