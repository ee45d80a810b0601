"""Layer 6, drivers: the jobs the CLI composes (pipeline) and the multi-process study (multihost).
claims/ (the claims engine) and sources/ (one package per source) are the other packages of this layer.
"""
