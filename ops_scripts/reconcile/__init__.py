"""``dpc reconcile``: offline output reconciliation on Spark (docs/reconcile.md)."""
