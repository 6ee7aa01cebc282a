"""Benchmarks: each bench/bench_*.py module has ``run(results_dir: Path) -> str``, which
measures something next to a baseline in the same invocation, writes its results under
bench/results/, and returns a short summary. `make bench` runs them all (python -m bench),
or `python -m bench NAME...` runs some."""
