"""The verl host: dataflex strategies inside verl 0.9.x, without a fork.

``import verl`` loads the ``verl.plugins`` entry point `dataflex_rl.hosts.verl.plugin`, which
registers the ``dataflex`` trainer mode (`dataflex_rl.hosts.verl.trainer`). Only this package
imports verl; importing it (but not ``plugin``/``trainer``) works without verl installed.
"""
