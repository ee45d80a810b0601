"""Experiments: each experiments/<name>/ has config.py (``get_config(preset)``, presets extending geomjax's
config dataclasses), source.py (the source's setting and numbers) and run.py, run from the repository root
as ``python -m experiments.<name>.run --preset smoke|cpu|paper --out DIR``."""
