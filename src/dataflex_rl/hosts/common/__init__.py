"""What every host shares, so a strategy behaves the same in the embedded engine, verl and TRL:
the driver, intake, draw, sampler, accounting, refill, state files, decision log and the
shared settings and checks. Hosts import these; mechanisms and core never do.
"""
