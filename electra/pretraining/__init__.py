"""Pretraining a run: its settings resolved once (`resolve.py`, light: no torch) and the loop
(`train.py`). Above the engine it runs on and the folder formats it writes and resumes from."""
