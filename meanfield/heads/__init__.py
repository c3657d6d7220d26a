"""Attention heads: their matrices, their time dependence (``schedules``), and heads of real checkpoints (``checkpoint``).

>>> import meanfield as mf
>>> mf.heads.identity(3).B.shape
(3, 3)
"""
from meanfield.heads.head import Head, HeadStack, head_from_spec, heads_from_config, identity, random_head, scalar, stack_heads

__all__ = ["Head", "HeadStack", "stack_heads", "identity", "scalar", "random_head", "head_from_spec", "heads_from_config"]
