"""What every host shares, so a strategy behaves the same in the embedded engine, verl and TRL.

* `driver`: the host driver, one strategy's lifecycle in any host (`Driver`: check, build,
  draw, decide, record, save and restore); the hosts only translate their tensors;
* `sampler`: the proportional domain sampler (largest-remainder quotas, per-domain epochs)
  and `draw_metrics`, the per-domain figures every host reports for its draw;
* `intake`: the prompts a host generates next (`Intake`; `Intake.from_rows` for a map-style
  dataset, and `read_row_domains`: the domain of every row, by `tasks.datasets.domain_column`);
* `draw`: one step's prompts, quota -> draw with pre-rollout skipping -> metrics
  (`draw_batch`, which `Intake` calls for every host: every batch is full; whether the host
  audits is how hosts differ);
* `accounting`: what skipping saved (skipped, replacements, tokens and seconds saved);
* `state`: state files written atomically and read back;
* `decision_log`: the per-step decision log that ``dataflex-rl replay`` reads;
* `config`: settings every host takes the same way (e.g. the decision log's), and the checks
  made before anything is built (`check_block`).

Hosts (``dataflex_rl.hosts.engine``, ``dataflex_rl.hosts.verl``, ``dataflex_rl.hosts.trl``) import
these; mechanisms and core never do.
"""
