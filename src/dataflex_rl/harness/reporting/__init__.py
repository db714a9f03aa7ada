"""Reporting: report.md, statistics.csv, plots and trackers, formatted from a stored analysis."""
