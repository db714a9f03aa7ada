"""Running experiments: the experiment file, control arms, the runs' plan, execution and resume."""
