"""Layer 5, analysis: the lens (cache, hooks, patching), the geometry study and its config, its
report, figures and the cross-model comparison.
"""
