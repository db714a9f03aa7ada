"""What every host shares, so a strategy behaves the same in the embedded engine and in verl.

* `sampler`: the proportional domain sampler (largest-remainder quotas, per-domain epochs)
  and `draw_metrics`, the per-domain figures every host reports for its draw;
* `intake`: the rows a host with a map-style dataset generates next (`Intake`, `domain_column`);
* `draw`: one step's prompts, quota -> draw with pre-rollout skipping -> metrics
  (`draw_batch`, which the engine and `Intake` call; ``exact`` is how hosts differ);
* `accounting`: what skipping saved (skipped, replacements, tokens and seconds saved);
* `state`: state files written atomically and read back;
* `decision_log`: the per-step decision log that ``dataflex-rl replay`` reads;
* `config`: settings every host takes the same way (e.g. the decision log's).

Hosts (``dataflex_rl.engine``, ``dataflex_rl.hosts.verl``) import these; mechanisms and core
never do.
"""
