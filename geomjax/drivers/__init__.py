"""Layer 6, drivers: the jobs the CLI composes (pipeline) and the multi-process study (multihost).
claims/ and claim_reports/ are the other packages of this layer.
"""
