"""`transformers` in and out: export of our model, run and fine-tuned folders as Hugging Face
folders (with their model cards), and Hugging Face task folders read as our tasks. The folder
formats themselves, the model folder's Hugging Face layout included, are `electra.folders`'."""
