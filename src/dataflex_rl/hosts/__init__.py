"""Hosts: the trainers strategies run in, one folder each, and what the harness knows of them.

* `engine`: the embedded CPU GRPO trainer (its loop, policy, sampler, checkpoints);
* `trl`: TRL's ``GRPOTrainer`` subclass and its training entry;
* `verl`: the verl plugin, its trainer and training entry;
* `common`: what every host shares at run time (the driver, intake and draw, accounting,
  decision log, state files, the settings every host shares);
* `host`: the typed `Host` the harness holds for each (settings schema, controls, check,
  training function, records, checkpoint and progress), `ExternalPythonHost` for hosts
  with their own Python; `registry`: name -> `Host`.

Each folder's ``host.py`` is what ``compare`` needs of that host; it imports no framework.
"""
