"""The fault matrix: kill -9, signals, dropped SSH, preemption with 0/1/120 s notice,
two homes on one account and hostile transfer streams, each checked for leaks, lost data
and truthful exit codes. `python -m tests.faults` runs it and prints the summary table
the README shows (also written to bench/results/faults.md)."""
