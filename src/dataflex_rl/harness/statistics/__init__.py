"""Statistics of paired seeds: tests, intervals, power, sequential verdicts and the analysis,
and the result rows they read (a results CSV, a tracker store)."""
