"""Experiment harness: strategies x paired seeds on any host, honest statistics, one report.

``dataflex-rl compare EXPERIMENT`` runs the matrix on the experiment's host (a
`dataflex_rl.hosts.host.Host` registered in `dataflex_rl.hosts.registry`: the embedded engine,
TRL, verl or your own; the harness never imports a host's package or framework; sub-package
``running``), ``dataflex-rl report`` analyses it, or external results
given as a CSV, with paired statistics (``statistics``) into one report document rendered to
report.md, report.html and the terminal (``reporting``), and ``dataflex-rl replay`` runs other
strategies on a logged run's decisions offline (``replay``). See docs/harness.md.
"""
