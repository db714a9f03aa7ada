"""Experiment harness: strategies × seeds with pairing, paired statistics, reports and plots.

``dataflex-rl compare EXPERIMENT`` runs a matrix on the embedded engine; ``dataflex-rl report
--from-csv FILE`` gives the same statistics for external results. See docs/harness.md.
"""
