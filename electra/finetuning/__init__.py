"""Fine-tuning on a task: the recipe's settings, the loop, seeds, evaluation, baselines and
`predict`."""
