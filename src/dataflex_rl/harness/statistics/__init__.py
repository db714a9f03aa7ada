"""Statistics of paired seeds: tests, intervals, power, sequential verdicts and the analysis."""
