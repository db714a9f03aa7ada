"""Experiment harness: strategies x paired seeds on any host, honest statistics, one report.

``dataflex-rl compare EXPERIMENT`` runs the matrix on the experiment's host (the embedded
engine, TRL or verl: a `dataflex_rl.hosts.host.Host`; the harness never imports their
frameworks; sub-package ``running``), ``dataflex-rl report`` analyses it, or external results
given as a CSV, with paired statistics (``statistics``) into one report document rendered to
report.md, report.html and the terminal (``reporting``), and ``dataflex-rl replay`` runs other
strategies on a logged run's decisions offline (``replay``). See docs/harness.md.
"""
