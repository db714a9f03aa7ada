"""Experiment harness: strategies × seeds with pairing, paired statistics, reports and plots.

``dataflex-rl compare EXPERIMENT`` runs a matrix on the experiment's host (the embedded engine,
TRL or verl: a `dataflex_rl.hosts.host.Host`; the harness never imports their frameworks);
``dataflex-rl report --from-csv FILE`` gives the same statistics for external results. See
docs/harness.md.
"""
