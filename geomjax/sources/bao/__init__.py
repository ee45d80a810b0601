"""The claims of Bao, Hataya & Karakida (2024) (:mod:`.claims`) and the figures of their report (:mod:`.report`)."""

TITLE = "Bao, Hataya & Karakida (2024), \"Self-attention networks localize when QK-eigenspectrum concentrates\""
SHORT = "Bao et al."
