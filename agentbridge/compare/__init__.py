"""Side-by-side comparison of runs: plots and an HTML report."""
