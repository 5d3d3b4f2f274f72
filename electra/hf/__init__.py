"""Model folders and the Hugging Face ecosystem: pretrained and fine-tuned folders, import from and
export to `transformers`."""
