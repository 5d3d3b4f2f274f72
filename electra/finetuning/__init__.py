"""Fine-tuning on a task: the loop, seeds, evaluation, baselines and `predict` (the recipe's
settings are `electra.tasks.finetune_config`, which the folder formats read too)."""
