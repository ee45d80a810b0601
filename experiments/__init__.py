"""Experiment scripts: each experiments/<name>/ has config.py (get_config(preset)) and run.py."""
