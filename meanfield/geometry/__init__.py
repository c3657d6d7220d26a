"""Geometry of the sphere: projections, geodesics and samplers (``sphere``), spherical Voronoi meshes (``mesh``)."""
