"""The papers' experiments, by topic.

* :mod:`~meanfield.solvers.experiments.multihead` — Pendharkar, arXiv 2605.04279 (Thms 19, 22, 25, 27, 39);
* :mod:`~meanfield.solvers.experiments.concentration` — Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931 (Thm 1);
* :mod:`~meanfield.solvers.experiments.time_dependent` — Massucco, Del Grande, Carioni, Brune and Schönlieb, arXiv 2605.18870;
* :mod:`~meanfield.solvers.experiments.real_heads` — trained MiniLM heads against random ones.
"""
