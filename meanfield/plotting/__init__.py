"""Pictures: token clouds, grid densities, curves and animations, as matplotlib figures (saved when given a path)."""
