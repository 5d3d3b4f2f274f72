"""This toolkit's own folder formats, read and written in one place each: the model folder (the
Hugging Face layout: `config.json`, weights, tokenizer), the pretraining run folder (its settings,
checkpoints and metrics) and the fine-tuned folder (a model folder plus its task and recipe).
What converts from and to `transformers` is `electra.hf`'s."""
