"""Layer 0, base: the numerics policy (_checks), the one JSON/NaN rule (io), reprs, device meshes and
the compilation cache (parallel). Imports nothing of geomjax above errors/typing.
"""
