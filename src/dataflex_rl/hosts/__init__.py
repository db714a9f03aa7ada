"""Hosts: the training frameworks strategies plug into (verl)."""
