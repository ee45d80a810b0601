"""Layer 1, theory: array math of the four sources (Song & Zhong, Wertich, Bao et al., the clock
algorithm). No model, no data, no training; a module imports only the base layer and earlier theory
modules (tests/unit/test_layering.py: THEORY_ORDER).
"""
