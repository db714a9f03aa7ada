"""The TRL host: dataflex strategies inside trl 1.16's ``GRPOTrainer``, without a fork.

`dataflex_rl.hosts.trl.loss` (no TRL import) applies a `Decision` to TRL's generation output.
Only this package imports TRL; importing ``loss`` works without it installed.
"""
