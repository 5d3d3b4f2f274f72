"""Whole runs composed from the steps: the demo, and the compute-matched experiment."""
